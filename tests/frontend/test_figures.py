"""The dashboard's figure builders on hand-made run views: what a user would see and hover."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from app.services.dashboard import RunView
from frontend.figures import (
    compare_figure,
    coverage_bars,
    empty_figure,
    lr_figure,
    node_figure,
    run_figure,
    telemetry_figure,
    text,
)
from frontend.figures.style import COVERAGE_COLORSCALE, VERDICT_COLOURS

HOSTILE = "<img src=x onerror=alert(1)>"
ESCAPED = "&lt;img src=x onerror=alert(1)&gt;"


def _series(steps: list[int], fn: Any, owner: Any = lambda s: 0) -> dict[str, list[Any]]:
    return {"steps": steps, "values": [fn(s) for s in steps], "segments": [owner(s) for s in steps]}


def _coverage(steps_per_epoch: int, epochs: int, bins: int, size: int) -> dict[str, Any]:
    """First bins never seen, the last repeated; the last epoch still running."""
    edges = [round(i * size / bins) for i in range(bins + 1)]

    def seen(b: int, e: int) -> float:
        return 0.0 if b < bins // 4 else (2.0 if b >= bins - bins // 4 else 1.0)

    mean = [[seen(b, e) for e in range(epochs)] for b in range(bins)]
    return {
        "step_edges": [e * steps_per_epoch + 0.5 for e in range(epochs + 1)],
        "index_edges": edges,
        "mean_seen": mean,
        "unseen": [[1.0 if v == 0 else 0.0 for v in row] for row in mean],
        "repeated": [[1.0 if v >= 2 else 0.0 for v in row] for row in mean],
        "epochs": [
            {
                "epoch": e,
                "first_step": e * steps_per_epoch + 1,
                "last_step": (e + 1) * steps_per_epoch,
                "unseen": size // 4,
                "repeated": size // 4,
                "complete": e < epochs - 1,
            }
            for e in range(epochs)
        ],
    }


def _segment(ordinal: int, start: int, end: int, **extra: Any) -> dict[str, Any]:
    base = {"resumed_from": None, "restored": None, "exit_reason": "finished"}
    return {"ordinal": ordinal, "start_step": start, "end_step": end, **base, **extra}


def _checkpoint(
    name: str,
    step: int,
    verdict: str,
    reasons: tuple[str, ...] | list[str] = (),
    sampler: bool = True,
) -> dict[str, Any]:
    return {
        "name": name,
        "step": step,
        "components": {"model": True, "optimizer": True, "sampler": sampler},
        "save_seconds": 4.5,
        "verdict": verdict,
        "reasons": list(reasons),
    }


def _finding(
    kind: str, severity: str, step: int | None, message: str, **extra: Any
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "step_end": None,
        "resume_from_step": None,
        "segment": None,
        "evidence": {},
    }
    return {"kind": kind, "severity": severity, "step": step, "message": message, **base, **extra}


def make_view(name: str = "llama-7b", message: str = "replayed 30 steps of data") -> RunView:
    """A 300-step run resumed at step 150 from a save at 150, after its first process had
    reached step 180: steps 151..180 were replayed (logged twice)."""
    steps = list(range(1, 301))
    owner = lambda s: 0 if s <= 150 else 1  # noqa: E731
    loss = _series(steps, lambda s: None if s == 50 else 4.0 / math.sqrt(s), owner)
    lr = _series(steps, lambda s: 1e-3 * min(1.0, (s if s <= 150 else s - 150) / 20), owner)
    grad = _series(steps, lambda s: 1.0 + (s % 7) / 10, owner)
    replayed_steps = list(range(151, 181))
    return RunView(
        run={
            "id": 7,
            "name": name,
            "project": "pretrain",
            "status": "finished",
            "verdict": "fail",
            "num_steps": 300,
            "first_step": 1,
            "last_step": 300,
            "num_segments": 2,
            "dataset_size": 6400,
        },
        metric_keys=["grad_norm", "loss", "lr"],
        series={"loss": loss, "lr": lr, "grad_norm": grad},
        replayed={
            "loss": _series(replayed_steps, lambda s: 4.1 / math.sqrt(s)),
            "lr": _series(replayed_steps, lambda s: 1e-3),
        },
        segments=[
            _segment(0, 0, 180, exit_reason="killed"),
            _segment(1, 150, 300, resumed_from="ckpt-150", restored=["model", "optimizer"]),
        ],
        checkpoints=[
            _checkpoint("ckpt-100", 100, "safe"),
            _checkpoint("ckpt-150", 150, "unsafe", reasons=["no sampler state"], sampler=False),
        ],
        findings=[
            _finding("data_replay", "critical", 151, message, step_end=180, resume_from_step=150),
            _finding("lr_reset", "warning", 151, "LR warm-up restarted", resume_from_step=150),
            _finding("loss_spike", "warning", 50, "spike"),
            _finding("note", "info", 10, "fyi"),
            _finding("run_level", "info", None, "no step"),
        ],
        coverage=_coverage(150, 2, 4, 6400),
        telemetry=[
            {
                "host": "node-a",
                "gpu": f"GPU-uuid-{i}",
                "gpu_index": i,
                "metric": "power",
                "steps": [None, 1.0, 2.5, 4.0, None],  # outside the run's time window: None
                "values": [300.0, 310.0, None, 305.0, 1.0],
                "times": [0.0, 1.0, 2.0, 3.0, 4.0],
            }
            for i in range(2)
        ],
    )


def bare_view() -> RunView:
    return RunView(
        run={"id": 1, "name": "empty"},
        metric_keys=[],
        series={},
        replayed={},
        segments=[],
        checkpoints=[],
        findings=[],
        coverage=None,
    )


def by_name(fig: go.Figure, name: str) -> Any:
    [trace] = [t for t in fig.data if t.name == name]
    return trace


def strings(value: Any) -> Iterator[str]:
    """Every string anywhere in a figure's dict."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from strings(item)


def shapes(fig: go.Figure, name: str) -> list[Any]:
    return [s for s in fig.layout.shapes if s.name == name]


def annotation_texts(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_text_escapes_markup() -> None:
    assert text(HOSTILE) == ESCAPED
    assert text("a & b <c>") == "a &amp; b &lt;c&gt;"
    assert text(3) == "3"


def test_run_figure_draws_metrics_over_the_coverage_heatmap() -> None:
    fig = run_figure(make_view(), ["loss", "grad_norm"])
    kinds = [(t.type, t.name) for t in fig.data]
    assert kinds[0] == ("heatmap", "coverage")
    loss, grad = by_name(fig, "loss"), by_name(fig, "grad_norm")
    assert (loss.type, loss.mode, loss.yaxis, loss.connectgaps) == ("scatter", "lines", "y", False)
    assert len(loss.x) == 300 and loss.y[49] is None
    assert grad.yaxis == "y3" and fig.layout.yaxis3.side == "right"
    assert fig.layout.yaxis3.overlaying == "y"
    heat = by_name(fig, "coverage")
    assert heat.zorder < loss.zorder  # drawn behind the curves
    assert fig.layout.uirevision == "run-7"
    assert fig.layout.yaxis.title.text == "loss"


def test_coverage_heatmap_cells_scale_and_hover() -> None:
    view = make_view()
    heat = by_name(run_figure(view, ["loss"]), "coverage")
    assert view.coverage is not None
    assert list(heat.x) == view.coverage["step_edges"]
    assert list(heat.y) == [0, 1600, 3200, 4800, 6400]
    assert [list(r) for r in heat.z] == view.coverage["mean_seen"]
    assert (heat.zmin, heat.zmax, heat.yaxis) == (0, 2, "y2")
    scale = [tuple(stop) for stop in heat.colorscale]
    assert scale[0] == (0.0, COVERAGE_COLORSCALE[0][1]) and scale[0][1] == "#d62728"
    assert scale[-1] == (1.0, "#1f5fbf")
    assert scale[1][0] == 0.5 and scale[1][1].lower() >= "#e0e0e0"  # once: near white
    assert 0 < heat.opacity < 1
    assert list(heat.colorbar.ticktext) == ["never", "once", "twice+"]
    assert list(heat.colorbar.tickvals) == [0, 1, 2]
    assert heat.text[0][0].startswith("epoch 0, samples 0\u20131,599: 100% unseen, 0% repeated")
    assert heat.text[3][1].startswith("epoch 1, samples 4,800\u20136,399: 0% unseen, 100% repeated")
    assert "in progress" in heat.text[3][1] and "in progress" not in heat.text[3][0]
    axis = run_figure(view, ["loss"]).layout.yaxis2
    assert (axis.overlaying, axis.side) == ("y", "right")


def test_run_figure_without_coverage() -> None:
    fig = run_figure(make_view(), ["loss"], show_coverage=False)
    assert "heatmap" not in {t.type for t in fig.data}
    assert "yaxis2" not in fig.layout.to_plotly_json()
    view = make_view()
    view.coverage = {"step_edges": [0.5, 10.5], "index_edges": [0, 5], "mean_seen": [[1, 2]]}
    assert "heatmap" not in {t.type for t in run_figure(view, ["loss"]).data}  # malformed grid


def test_findings_one_trace_per_severity_on_the_loss_line() -> None:
    fig = run_figure(make_view(), ["loss"])
    critical, warning, info = (by_name(fig, s) for s in ("critical", "warning", "info"))
    assert (len(critical.x), len(warning.x), len(info.x)) == (1, 2, 1)  # stepless one left out
    assert critical.marker.symbol != warning.marker.symbol
    assert critical.marker.color != warning.marker.color
    assert critical.y[0] == 4.0 / math.sqrt(151)
    assert warning.y[1] == max(4.0 / math.sqrt(s) for s in range(1, 301) if s != 50)  # NaN: top
    assert critical.hovertext[0].startswith("<b>data_replay</b> (critical), step 151\u2013180")
    assert "replayed 30 steps of data" in critical.hovertext[0]


def test_replayed_points_of_the_first_metric() -> None:
    replayed = by_name(run_figure(make_view(), ["loss", "grad_norm"]), "replayed")
    assert replayed.mode == "markers"
    assert list(replayed.x) == list(range(151, 181))
    assert replayed.yaxis in (None, "y")


def test_checkpoints_are_dotted_lines_coloured_by_verdict() -> None:
    fig = run_figure(make_view(), ["loss"])
    lines = shapes(fig, "checkpoint")
    assert [(s.x0, s.x1) for s in lines] == [(100, 100), (150, 150)]
    assert {s.line.dash for s in lines} == {"dot"} and {s.yref for s in lines} == {"paper"}
    assert lines[0].line.color == VERDICT_COLOURS["safe"]
    assert lines[1].line.color == VERDICT_COLOURS["unsafe"]
    hover = by_name(fig, "checkpoints").hovertext[1]
    assert "ckpt-150" in hover and "missing: sampler" in hover and "no sampler state" in hover


def test_resumes_dashed_with_their_replayed_range_shaded() -> None:
    fig = run_figure(make_view(), ["loss"])
    [rect] = shapes(fig, "replayed range")
    assert (rect.type, rect.x0, rect.x1, rect.yref) == ("rect", 150, 180, "paper")
    assert rect.opacity < 0.3
    [line] = shapes(fig, "resume")
    assert (line.x0, line.line.dash) == (150, "dash")
    [note] = fig.layout.annotations
    assert note.text == "resume from 150"
    assert "replayed steps 151\u2013180" in note.hovertext


def test_hostile_text_is_escaped_everywhere() -> None:
    view = make_view(name=HOSTILE, message=f"see {HOSTILE} & more")
    view.checkpoints[0]["name"] = HOSTILE
    view.segments[1]["resumed_from"] = HOSTILE
    view.series[HOSTILE] = view.series["grad_norm"]
    figures = [
        run_figure(view, ["loss", HOSTILE]),
        compare_figure([view], "loss"),
        empty_figure(HOSTILE),
        telemetry_figure(_with_host(view, HOSTILE)),
    ]
    for fig in figures:
        assert not any("<img" in s for s in strings(fig.to_dict())), fig.layout
    run = figures[0]
    assert ESCAPED in run.layout.title.text
    hover = by_name(run, "critical").hovertext[0]
    assert "see &lt;img src=x onerror=alert(1)&gt; &amp; more" in hover
    assert ESCAPED in by_name(run, "checkpoints").hovertext[0]
    assert ESCAPED in run.layout.annotations[0].hovertext
    assert by_name(run, ESCAPED).yaxis == "y3" and ESCAPED in run.layout.yaxis3.title.text
    assert figures[1].data[0].name == ESCAPED
    assert figures[2].layout.annotations[0].text == ESCAPED


def _with_host(view: RunView, host: str) -> RunView:
    view.telemetry = [{**item, "host": host} for item in view.telemetry]
    return view


def test_every_builder_accepts_missing_data() -> None:
    view = bare_view()
    empty = run_figure(view, ["loss"])
    assert not empty.data and "No metrics" in annotation_texts(empty)[0]
    assert "No coverage" in annotation_texts(coverage_bars(view))[0]
    assert "No learning-rate" in annotation_texts(lr_figure(view))[0]
    assert annotation_texts(telemetry_figure(view)) == ["No GPU telemetry for this run"]
    assert "None of the selected runs" in annotation_texts(compare_figure([view], "loss"))[0]
    assert "No power readings" in annotation_texts(node_figure({"metric": "power"}))[0]
    assert annotation_texts(node_figure({}))
    coverage_only = bare_view()
    coverage_only.coverage = _coverage(10, 1, 2, 100)
    assert [t.type for t in run_figure(coverage_only, []).data] == ["heatmap"]
    odd = make_view()
    odd.segments = [{"ordinal": 1, "start_step": None, "end_step": None}]
    odd.checkpoints = [{"name": "x", "step": None}]
    odd.findings = [{"severity": "bogus", "step": 3}]
    fig = run_figure(odd, ["loss", "missing"])
    assert len(by_name(fig, "warning").x) == 1 and not fig.layout.shapes


def test_coverage_bars_per_epoch_with_the_resume_inside_its_epoch() -> None:
    fig = coverage_bars(make_view())
    unseen, repeated = by_name(fig, "unseen"), by_name(fig, "repeated")
    assert (unseen.type, list(unseen.x), list(unseen.y)) == ("bar", [0, 1], [1600, 1600])
    assert list(repeated.y) == [1600, 1600]
    assert "25.0% of the dataset" in unseen.hovertext[0]
    assert "in progress" in repeated.hovertext[1]
    [line] = shapes(fig, "resume")
    assert round(line.x0) == 0 and line.x0 == line.x1  # step 150 ends designed epoch 0
    assert annotation_texts(fig) == ["resume from 150"]


def test_lr_marks_the_first_rate_after_the_resume() -> None:
    fig = lr_figure(make_view())
    assert [t.name for t in fig.data] == ["lr", "replayed lr", "resumes"]
    resumes = by_name(fig, "resumes")
    assert list(resumes.x) == [151] and resumes.y[0] == 1e-3 / 20  # warm-up restarted
    assert "before the resume (step 150): lr 1.000e-03" in resumes.hovertext[0]
    assert len(by_name(fig, "replayed lr").x) == 30


def test_telemetry_one_line_per_gpu_and_saves() -> None:
    fig = telemetry_figure(make_view())
    assert [t.name for t in fig.data] == ["node-a · GPU 0", "node-a · GPU 1"]
    assert list(fig.data[0].x) == [1.0, 2.5, 4.0]  # points without a step dropped
    assert list(fig.data[0].y) == [310.0, None, 305.0]
    assert fig.layout.yaxis.title.text == "power (W)"
    assert [s.x0 for s in shapes(fig, "save")] == [100, 150]


def test_node_figure_keeps_gaps() -> None:
    payload = {
        "node_id": 3,
        "metric": "gpu_util",
        "series": [
            {
                "gpu": "GPU-a",
                "gpu_index": 0,
                "times": [1000, 1010, 1020, 1030, 1100, 1110],
                "values": [50.0, None, 52.0, 53.0, 60.0, 61.0],
            },
            {"gpu": "GPU-b", "gpu_index": None, "times": [1000, 1010, 1020], "values": [1, 2, 3]},
        ],
    }
    fig = node_figure(payload)
    gpu0, gpu1 = fig.data
    assert (gpu0.name, gpu1.name) == ("GPU 0", "GPU-b")
    assert list(gpu0.y) == [50.0, None, 52.0, 53.0, None, 60.0, 61.0]  # None across 1030..1100
    assert isinstance(gpu0.x[4], datetime) and gpu0.x[4] == datetime(1970, 1, 1, 0, 17, 45)
    assert gpu0.connectgaps is False and list(gpu1.y) == [1, 2, 3]


def test_compare_figure_one_colour_per_run_with_resume_markers() -> None:
    a, b = make_view("run-a"), make_view("run-a")
    b.run["id"], b.segments = 8, []
    fig = compare_figure([a, b], "loss")
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in lines] == ["run-a #7", "run-a #8"]
    assert lines[0].line.color != lines[1].line.color
    [marks] = [t for t in fig.data if t.mode == "markers"]
    assert (list(marks.x), marks.showlegend) == ([150.0], False)
    assert marks.marker.color == lines[0].line.color and marks.legendgroup == lines[0].legendgroup


def test_run_figure_builds_fast_on_a_full_view() -> None:
    view = make_view()
    steps = list(range(2000))
    for key in ("loss", "grad_norm"):
        view.series[key] = _series(steps, lambda s: 1.0 / (s + 1))
    view.coverage = _coverage(20, 100, 64, 64_000)
    view.checkpoints = [dict(view.checkpoints[0], step=s) for s in range(0, 2000, 40)]
    start = time.perf_counter()
    fig = run_figure(view, ["loss", "grad_norm"])
    elapsed = time.perf_counter() - start
    print(f"run_figure: {elapsed * 1000:.0f} ms")
    assert len(by_name(fig, "coverage").z) == 64 and len(by_name(fig, "coverage").z[0]) == 100
    assert elapsed < 1.0
