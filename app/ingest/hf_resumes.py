"""Which process of a Hugging Face Trainer run logged which ``log_history`` entries.

A resumed process loads the checkpoint's ``trainer_state.json`` and appends to its history, so a
resume from the newest checkpoint leaves no trace in any history. What can be seen:

- a checkpoint whose history diverges from the newest one's: a process logged past a checkpoint
  and a later process resumed from that checkpoint (or an earlier one) and logged those steps
  again. The resume is at the latest checkpoint before the first differing entry; the earlier
  process's entries are kept as rows that the later process replays. Identical replays (a
  deterministic resume) are invisible, and harmless.
- the logged ``epoch`` going back while the step rises: the resumed process restarted its epoch
  count, i.e. did not skip the data it had consumed (``ignore_data_skip``, streaming datasets).

Checkpoints of two different runs side by side (their logging/eval/save steps or batch size
differ, or their histories differ from the first entry) are refused, naming both folders.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.ingest.context import ReadContext
from app.ingest.errors import IngestError
from app.ingest.hf_history import (
    Segment,
    State,
    entry_step,
    finite,
    is_eval_or_summary,
    last_logged_step,
    step_from,
)
from app.ingest.records import EventRecord

# kept from the checkpoint on resume, so they differ only between different runs
_RUN_SETTINGS = ("logging_steps", "eval_steps", "save_steps", "train_batch_size")


def resume_segments(ctx: ReadContext, states: list[State]) -> list[Segment]:
    """One segment per process: the histories the newest one diverges from, oldest first, then
    the newest; each later segment starts where its process resumed. ``states`` are sorted by
    step, the newest last."""
    main = states[-1]
    first_save = min((s.step for s in states if s.checkpoint), default=None)
    leaves: dict[bytes, State] = {}
    for state in states[:-1]:
        shared = _lcp(state.keys, main.keys)
        if shared == len(state.keys):
            continue  # a prefix of the newest history: nothing was lost
        _check_same_run(state, main, shared, first_save)
        leaves.setdefault(state.keys.tobytes(), state)
    branches = [
        s
        for s in leaves.values()
        if not any(o is not s and _lcp(s.keys, o.keys) == len(s.keys) for o in leaves.values())
    ]
    order = [*sorted(branches, key=lambda s: (_lcp(s.keys, main.keys), s.step)), main]
    segments = [Segment(order[0], 0, len(order[0].entries), 0)]
    for k, state in enumerate(order[1:], start=1):
        shared, other = max(((_lcp(state.keys, o.keys), o) for o in order[:k]), key=_first)
        differ = [
            s
            for s in (step_from(state.entries, shared), step_from(other.entries, shared))
            if s is not None
        ]
        first_new = min(differ) if differ else state.step + 1
        saved = _latest_checkpoint(states, state, lo=0, hi=first_new)
        if saved is None:
            start_step = last_logged_step(state.entries[:shared])
            ctx.warnings.add(
                f"{other.name} holds log entries after step {start_step} that {state.name}"
                " logged again: a resume from a checkpoint no longer in the source",
                kind="hf-resume",
            )
        else:
            start_step = saved.step
            ctx.warnings.add(
                f"{other.name} holds log entries after step {start_step} that {state.name}"
                f" logged again: a resume from {saved.name}",
                kind="hf-resume",
            )
        steps = [entry_step(e) for e in state.entries]
        lo = next((i for i, s in enumerate(steps) if s is not None and s > start_step), len(steps))
        segments.append(
            Segment(
                state,
                lo,
                len(state.entries),
                start_step,
                None if saved is None else saved.name,
                f"{other.name} holds an earlier process's log entries past step {start_step}",
            )
        )
    return segments


def _check_same_run(state: State, main: State, shared: int, first_save: int | None) -> None:
    settings = [
        k for k in _RUN_SETTINGS if k in state.doc and k in main.doc and state.doc[k] != main.doc[k]
    ]
    first = step_from(state.entries, 0)
    early = shared == 0 and first is not None and first <= (first_save or 0)
    if settings or early:
        why = (
            f"their {', '.join(settings)} differ"
            if settings
            else "their log histories differ from the first entry"
        )
        raise IngestError(
            f"{state.folder or state.name} and {main.folder or main.name} are checkpoints of two"
            f" different training runs ({why}); ingest one run per source",
            file=state.path,
        )


def split_epoch_resets(
    segments: list[Segment], states: list[State], ctx: ReadContext
) -> list[Segment]:
    """Split a segment where the logged epoch goes back while the step rises: a resumed process
    that restarted its epoch count instead of skipping the data it had consumed."""
    out: list[Segment] = []
    for original in segments:
        current = original
        state, lo, hi = original.state, original.lo, original.hi
        last_epoch: float | None = None
        last_step = original.start_step
        for index in range(lo, hi):
            entry = state.entries[index]
            step, epoch = entry_step(entry), finite(entry.get("epoch"))
            if step is None or epoch is None or is_eval_or_summary(entry):
                continue
            if last_epoch is not None and epoch < last_epoch - 1e-9 and step > last_step:
                saved = _latest_checkpoint(states, state, lo=last_step, hi=step)
                evidence = f"epoch went back from {last_epoch} to {epoch} at step {step}"
                ctx.warnings.add(
                    f"{state.path}: {evidence}: a resume that restarted the epoch instead of"
                    " skipping the data already consumed",
                    kind="hf-epoch-reset",
                )
                current.hi = index
                out.append(current)
                start = last_step if saved is None else saved.step
                name = None if saved is None else saved.name
                current = Segment(state, index, hi, start, name, evidence)
            last_epoch, last_step = epoch, step
        out.append(current)
    return out


def lifecycle(segments: list[Segment]) -> list[EventRecord]:
    """A ``process_start`` per segment, and a ``process_exit`` at the last step of each but
    the last."""
    events: list[EventRecord] = []
    for k, segment in enumerate(segments):
        payload: dict[str, Any] = {"resumed_from": segment.resumed_from}
        if segment.evidence and k > 0:
            payload["evidence"] = segment.evidence
        events.append(EventRecord("process_start", segment.start_step, None, payload))
        if k < len(segments) - 1:
            steps = [entry_step(e) for e in segment.state.entries[segment.lo : segment.hi]]
            last = max((s for s in steps if s is not None), default=segment.start_step)
            events.append(EventRecord("process_exit", last, None, {"reason": "unknown"}))
    return events


def _latest_checkpoint(states: list[State], lineage: State, *, lo: int, hi: int) -> State | None:
    """The newest checkpoint in [lo, hi) whose history is a prefix of ``lineage``'s."""
    found = [
        s
        for s in states
        if s.checkpoint and lo <= s.step < hi and _lcp(s.keys, lineage.keys) == len(s.keys)
    ]
    return max(found, key=lambda s: s.step) if found else None


def _lcp(a: np.ndarray, b: np.ndarray) -> int:
    """How many entries two histories share from their start (one C-level pass)."""
    n = min(a.size, b.size)
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def _first(pair: tuple[int, State]) -> int:
    return pair[0]
