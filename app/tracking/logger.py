"""Training-side logger that writes Runwatch's run-directory format.

Standard library only, so this file can be copied into a training repository on its own
(streaming to a server also needs ``stream.py`` next to it).

Every line is flushed to the operating system as it is written, so a process killed with
SIGKILL loses at most the line it was writing; the next process that appends to the file first
cuts that partial line off, keeping every file valid JSON Lines.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import numbers
import operator
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stream import StreamClient, StreamStatus

LOG_FILES = ("metrics", "samples", "events", "evals")
CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
SAMPLER_STATE = "sampler.json"
CONFIG = "config.json"
_TAIL_CHUNK = 1 << 16


class RunLogger:
    """Appends one process's records to a run directory (and optionally streams them).

    Use one instance per training process (on rank 0)::

        with RunLogger("runs/exp1", config=cfg) as log:
            log.start(step=resume_step, resumed_from="step_000300", restored=["model", ...])
            log.metrics(step, loss=..., lr=..., grad_norm=..., epoch=...)

    Methods are thread-safe. Disk errors raise; network errors never do (see :attr:`stream`).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        project: str = "default",
        name: str | None = None,
        server: str | None = None,
        token: str | None = None,
        config: Mapping[str, Any] | None = None,
        flush_every: int = 1,
        stream_options: Mapping[str, Any] | None = None,
    ) -> None:
        """``server``: also stream every record there, with ``token`` (default: the
        ``RUNWATCH_TOKEN`` environment variable). ``flush_every``: lines per file between
        flushes to the OS (1: a kill loses nothing but a partial line). ``stream_options`` go to
        :class:`~.stream.StreamClient`."""
        if flush_every < 1:
            raise ValueError("flush_every must be at least 1")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.project = project
        self.name = name or self.run_dir.resolve().name
        self.logger_id = uuid.uuid4().hex
        self.flush_every = flush_every
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._files: dict[str, IO[str]] = {}
        self._unflushed: dict[str, int] = {}
        self._last_step = 0
        self._exited = False
        self._closed = False
        self._save_window: tuple[int, float, float | None] | None = None
        self.config: dict[str, Any] = self._read_config()
        self.stream: StreamClient | None = None
        if server:
            from .stream import StreamClient

            self.stream = StreamClient(
                server,
                project=project,
                name=self.name,
                config=self.config if config is None else {**dict(config), **self.config},
                token=token,
                logger_id=self.logger_id,
                **dict(stream_options or {}),
            )
        if config:
            self.set_config(config)
        atexit.register(self.close)

    # -- records ------------------------------------------------------------------------------

    def start(
        self,
        step: int = 0,
        resumed_from: str | os.PathLike[str] | None = None,
        restored: Iterable[str] | None = None,
    ) -> None:
        """Record this process's start. ``resumed_from`` names the checkpoint loaded (a name, or
        any path ending in it); ``restored`` lists the components actually loaded from it. Where
        the process runs (host, Slurm job, Kubernetes pod) is recorded too: Runwatch joins the
        run to those nodes' GPU telemetry."""
        source = None
        if resumed_from is not None:
            base = os.path.basename(os.path.normpath(os.fspath(resumed_from)))
            source = f"{CHECKPOINTS}/{base}"
        parts = None if restored is None else [str(c) for c in restored]
        fields: dict[str, Any] = {"resumed_from": source, "restored": parts, **_placement()}
        self.event("process_start", step, **fields)

    def metrics(self, step: int, **values: Any) -> None:
        """One optimizer step's metrics (numbers only: ints, floats, numpy/torch scalars)."""
        self._numeric_line("metrics", step, values)

    def eval(self, step: int, **values: Any) -> None:
        """Evaluation metrics measured at ``step``."""
        self._numeric_line("evals", step, values)

    def samples(self, step: int, ids: Iterable[Any]) -> None:
        """The dataset indices optimizer step ``step`` consumed (a list, numpy array or tensor)."""
        step = _step(step)
        tolist = getattr(ids, "tolist", None)
        raw = tolist() if callable(tolist) else ids
        try:
            sample_ids = [operator.index(i) for i in raw]
        except TypeError:
            raise TypeError("sample ids must be a flat sequence of integers") from None
        if sample_ids and min(sample_ids) < 0:
            raise ValueError(f"sample ids must not be negative (got {min(sample_ids)})")
        self._write("samples", {"step": step, "sample_ids": sample_ids})

    def event(self, event: str, step: int, *, time: float | None = None, **fields: Any) -> None:
        """Any event line: ``{"event", "step", "time", **fields}``."""
        record = {"event": event, "step": _step(step), "time": _now() if time is None else time}
        record.update(fields)
        self._write("events", record)

    @contextlib.contextmanager
    def saving(self, step: int) -> Iterator[None]:
        """Wrap a checkpoint save: records ``checkpoint_save_start``/``_end`` and gives the next
        :meth:`checkpoint` for this step its ``time_start``/``time_end``. A save that raises
        records no end."""
        started = _now()
        self.event("checkpoint_save_start", step, time=started)
        with self._lock:
            self._save_window = (step, started, None)
        yield
        ended = _now()
        self.event("checkpoint_save_end", step, time=ended)
        with self._lock:
            self._save_window = (step, started, ended)

    def checkpoint(
        self,
        name: str,
        step: int,
        *,
        components: Mapping[str, Any],
        consumed_samples: int | None = None,
        epoch: int | None = None,
        consumed_in_epoch: int | None = None,
        seed: int | None = None,
        shuffle: bool | None = None,
        dataset_size: int | None = None,
        global_batch_size: int | None = None,
        data_state: Mapping[str, Any] | None = None,
        time_start: float | None = None,
        time_end: float | None = None,
    ) -> dict[str, Any]:
        """Write ``checkpoints/<name>/manifest.json`` (atomically) and return it.

        ``components`` maps a component (model, optimizer, scheduler, rng, dataloader, scaler) to
        the path it was saved to (sizes are measured; relative paths are looked up in the
        manifest folder, then the working directory) or to ``{"file", "bytes"}``. ``data_state``
        is the loader position (``{"seed", "shuffle", "epoch", "consumed_in_epoch"}``): it is
        written to ``sampler.json`` and fills the manifest fields not given."""
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise ValueError(f"checkpoint name must be a plain folder name, got {name!r}")
        step = _step(step)
        folder = self.run_dir / CHECKPOINTS / name
        folder.mkdir(parents=True, exist_ok=True)
        parts = {str(key): _component(folder, str(key), spec) for key, spec in components.items()}
        state = None if data_state is None else dict(data_state)
        if state is not None:
            epoch = _int_field(state, "epoch") if epoch is None else epoch
            consumed_in_epoch = (
                _int_field(state, "consumed_in_epoch")
                if consumed_in_epoch is None
                else consumed_in_epoch
            )
            seed = _int_field(state, "seed") if seed is None else seed
            if shuffle is None and isinstance(state.get("shuffle"), bool):
                shuffle = state["shuffle"]
        with self._lock:
            window = self._save_window
        if window is not None and window[0] == step:
            time_start = window[1] if time_start is None else time_start
            time_end = (window[2] or _now()) if time_end is None else time_end
        manifest: dict[str, Any] = {
            "step": step,
            "time_start": time_start,
            "time_end": _now() if time_end is None else time_end,
            "consumed_samples": consumed_samples,
            "epoch": epoch,
            "consumed_in_epoch": consumed_in_epoch,
            "seed": seed,
            "shuffle": shuffle,
            "dataset_size": dataset_size,
            "global_batch_size": global_batch_size,
            "components": parts,
        }
        extra: dict[str, Any] = {}
        if state is not None:
            _write_json_atomic(folder / SAMPLER_STATE, state)
            extra[SAMPLER_STATE] = state
            manifest["data_state"] = state
            if "dataloader" not in parts:
                size = (folder / SAMPLER_STATE).stat().st_size
                parts["dataloader"] = {"file": SAMPLER_STATE, "bytes": size}
        with self._lock:
            self._check_open()
            _write_json_atomic(folder / MANIFEST, manifest)
            self._last_step = step
            if self.stream is not None:
                record = {"file": "checkpoint", "name": name, "manifest": manifest, "extra": extra}
                self.stream.submit(record)
        return manifest

    def set_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Add keys to ``config.json``. Keys it already holds keep their value: the first process
        records the run's design and a resumed one cannot rewrite it. Returns the config."""
        with self._lock:
            self._check_open()
            merged = {**dict(config), **self.config}
            if merged != self.config or not (self.run_dir / CONFIG).exists():
                # Round-trip so the stored, streamed and in-memory configs are identical.
                merged = json.loads(json.dumps(merged, default=str))
                _write_json_atomic(self.run_dir / CONFIG, merged)
                self.config = merged
                if self.stream is not None:
                    self.stream.submit({"file": "config", "data": merged})
            return self.config

    def exit(self, step: int | None = None, reason: str = "finished") -> None:
        """Record this process's end (once; later calls do nothing). A process that crashes
        writes none, which is how Runwatch tells a crash from an exit."""
        with self._lock:
            if self._exited:
                return
            self.event("process_exit", self._last_step if step is None else step, reason=reason)
            self._exited = True

    # -- lifecycle ----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Flush every file; with a server, wait up to ``timeout`` s for the records to be sent.
        Returns whether nothing is left unsent."""
        with self._lock:
            for name, handle in self._files.items():
                handle.flush()
                self._unflushed[name] = 0
        return self.stream.flush(timeout) if self.stream is not None else True

    def close(self, timeout: float | None = None) -> None:
        """Close the files and stop streaming, waiting up to ``timeout`` s (default: the
        stream's ``close_timeout``) for unsent records. Does not record an exit. In a forked
        child (a DataLoader worker, say) it does nothing: the files and stream are the parent's."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            files, self._files = self._files, {}
        atexit.unregister(self.close)
        for handle in files.values():
            handle.close()
        if self.stream is not None:
            self.stream.close(timeout)

    @property
    def stream_status(self) -> StreamStatus | None:
        """Counters of the server stream (``sent``, ``dropped``, ``last_error``...), or None."""
        return self.stream.status() if self.stream is not None else None

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._closed:
                return
            clean = exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))
            if clean:
                self.exit(reason="finished")
            else:
                self.exit(reason=f"error: {type(exc).__name__}")
        finally:
            self.close()

    # -- internals ----------------------------------------------------------------------------

    def _numeric_line(self, file: str, step: int, values: Mapping[str, Any]) -> None:
        record: dict[str, Any] = {"step": _step(step)}
        for key, value in values.items():
            if key != "time":
                record[key] = _number(key, value)
        record["time"] = _number("time", values["time"]) if "time" in values else _now()
        self._write(file, record)

    def _write(self, file: str, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":")) + "\n"
        with self._lock:
            self._check_open()
            handle = self._files.get(file) or self._open(file)
            handle.write(line)
            pending = self._unflushed[file] + 1
            if pending >= self.flush_every:
                handle.flush()
                pending = 0
            self._unflushed[file] = pending
            if file != "evals":  # an evaluation may report an earlier step
                self._last_step = record["step"]
            if self.stream is not None:
                self.stream.submit_json(f'{{"file":"{file}","data":{line[:-1]}}}')

    def _open(self, file: str) -> IO[str]:
        path = self.run_dir / f"{file}.jsonl"
        _drop_partial_last_line(path)
        handle = path.open("a", encoding="utf-8", newline="\n")
        self._files[file] = handle
        self._unflushed[file] = 0
        return handle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"RunLogger for {self.run_dir} is closed")

    def _read_config(self) -> dict[str, Any]:
        path = self.run_dir / CONFIG
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except ValueError:
            return {}  # a torn write: the next set_config replaces it
        return doc if isinstance(doc, dict) else {}


def _now() -> float:
    return time.time()


def _placement() -> dict[str, str]:
    """This process's host, and its Slurm job or Kubernetes pod when it has one."""
    where = {"host": socket.gethostname()}
    if os.environ.get("SLURM_JOB_ID"):
        where["slurm_job"] = os.environ["SLURM_JOB_ID"]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        where["pod"] = os.environ.get("POD_NAME") or os.environ.get("HOSTNAME", "")
    return where


def _step(step: Any) -> int:
    try:
        value = operator.index(step)
    except TypeError:
        raise TypeError(f"step must be an integer, got {type(step).__name__}") from None
    if value < 0:
        raise ValueError(f"step must not be negative (got {value})")
    return value


def _number(key: str, value: Any) -> int | float:
    kind = type(value)
    if kind is int or kind is float:
        return value
    if not isinstance(value, (bool, numbers.Real)):
        item = getattr(value, "item", None)  # numpy and torch scalars
        if callable(item):
            try:
                value = item()
            except (ValueError, RuntimeError):
                raise TypeError(f"metric {key!r} must be a single number") from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"metric {key!r} must be a number, got {type(value).__name__}")
    if isinstance(value, numbers.Integral):
        return int(value)
    return float(value)


def _int_field(doc: Mapping[str, Any], key: str) -> int | None:
    value = doc.get(key)
    return value if type(value) is int else None


def _component(folder: Path, name: str, spec: Any) -> dict[str, Any]:
    if spec is None:
        return {"file": None, "bytes": None}
    if isinstance(spec, Mapping):
        file, size = spec.get("file"), spec.get("bytes")
        return {"file": None if file is None else str(file), "bytes": size}
    given = os.fspath(spec)
    path = Path(given)
    candidates = [path] if path.is_absolute() else [folder / path, path]
    found = next((p for p in candidates if p.exists()), None)
    if found is None:
        raise FileNotFoundError(f"checkpoint component {name!r}: {given} does not exist")
    size = _size(found)
    try:
        file = found.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        file = given
    return {"file": file, "bytes": size}


def _size(path: Path) -> int:
    if not path.is_dir():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for file in files:
            full = os.path.join(root, file)
            if not os.path.islink(full):
                total += os.stat(full).st_size
    return total


def _write_json_atomic(path: Path, doc: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    text = json.dumps(doc, indent=1, default=str) + "\n"
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _drop_partial_last_line(path: Path) -> None:
    """Cut off a last line without its newline (a write interrupted by a kill)."""
    try:
        handle = path.open("r+b")
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        if end == 0:
            return
        handle.seek(end - 1)
        if handle.read(1) == b"\n":
            return
        pos = end
        while pos > 0:
            start = max(0, pos - _TAIL_CHUNK)
            handle.seek(start)
            chunk = handle.read(pos - start)
            newline = chunk.rfind(b"\n")
            if newline >= 0:
                handle.truncate(start + newline + 1)
                return
            pos = start
        handle.truncate(0)
