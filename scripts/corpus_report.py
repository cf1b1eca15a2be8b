"""Precision and recall of Runwatch's findings over a labelled corpus of runs.

Every run directory with a ``truth.json`` is ingested and analysed the way the product does it
(a temporary SQLite database, the ingest and analysis services), and its warning/critical
findings are scored against the labels (``app.analysis.truth``).

    python -m scripts.corpus_report CORPUS_DIR [--json OUT] [--strict]
    python -m scripts.corpus_report --generate DIR [--quick]   # build the torch corpus first
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from app import migrate
from app.analysis.truth import score
from app.config import Settings
from app.db import make_engine, session_scope
from app.services import ingest as ingest_service
from app.services.findings import finding_dict, list_findings
from app.services.sources import store_path


def evaluate(corpus: Path, *, progress: bool = True) -> dict[str, Any]:
    runs = sorted(p.parent for p in corpus.glob("*/truth.json"))
    if not runs:
        raise SystemExit(f"no run with a truth.json under {corpus}")
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp), database_url=f"sqlite:///{tmp}/corpus.db")
        engine = make_engine(settings.sqlalchemy_url)
        migrate.upgrade(engine)
        rows = [_evaluate_run(engine, settings, run, progress) for run in runs]
        engine.dispose()
    return _summarise(rows)


def _evaluate_run(engine: Any, settings: Settings, run: Path, progress: bool) -> dict[str, Any]:
    truth = json.loads((run / "truth.json").read_text())
    started = time.perf_counter()
    source = store_path(run, settings)
    with session_scope(engine) as session:
        job = ingest_service.submit(
            session=session, source=source, project="corpus", run_name=run.name
        )
        job_id = job.id
    job = ingest_service.run_job(engine=engine, settings=settings, job_id=job_id)
    if job.state != "succeeded" or job.run_id is None:
        raise SystemExit(f"{run.name}: ingest failed: {job.error}")
    with session_scope(engine) as session:
        findings = [finding_dict(f) for f in list_findings(session=session, run_id=job.run_id)]
    result = score(truth, findings)
    spikes = set(truth.get("non_checkpoint_spikes", []))
    found_spikes = {f["step"] for f in findings if f["kind"] == "loss_spike"}
    row = {
        "run": run.name,
        "fault": truth.get("fault", truth.get("scenario")),
        "expected": sorted(result.expected),
        "missed": sorted(result.missed),
        "false_alarms": sorted(result.false_alarms),
        "true_positives": sorted(result.true_positives),
        "spikes_expected": len(spikes),
        "spikes_found": len({s for s in spikes if any(abs(s - f) <= 2 for f in found_spikes)}),
        "seconds": round(time.perf_counter() - started, 2),
    }
    if progress:
        mark = "ok  " if result.exact else "MISS"
        detail = "" if result.exact else f" missed={row['missed']} false={row['false_alarms']}"
        print(f"{mark} {run.name:40s} {row['seconds']:5.2f}s{detail}", file=sys.stderr)
    return row


def _summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    tp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    for row in rows:
        tp.update(kind for _, kind in row["true_positives"])
        fn.update(kind for _, kind in row["missed"])
        fp.update(kind for _, kind in row["false_alarms"])
    kinds = sorted(set(tp) | set(fn) | set(fp))
    per_kind = {
        kind: {
            "true_positives": tp[kind],
            "missed": fn[kind],
            "false_alarms": fp[kind],
            "precision": _ratio(tp[kind], tp[kind] + fp[kind]),
            "recall": _ratio(tp[kind], tp[kind] + fn[kind]),
        }
        for kind in kinds
    }
    all_tp, all_fn, all_fp = sum(tp.values()), sum(fn.values()), sum(fp.values())
    spikes_expected = sum(r["spikes_expected"] for r in rows)
    return {
        "runs": len(rows),
        "runs_exact": sum(1 for r in rows if not r["missed"] and not r["false_alarms"]),
        "faults": dict(Counter(str(r["fault"]) for r in rows)),
        "per_kind": per_kind,
        "overall": {
            "precision": _ratio(all_tp, all_tp + all_fp),
            "recall": _ratio(all_tp, all_tp + all_fn),
            "false_alarms": all_fp,
            "missed": all_fn,
        },
        "unattributed_spikes": {
            "expected": spikes_expected,
            "found": sum(r["spikes_found"] for r in rows),
        },
        "rows": rows,
    }


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def print_table(summary: dict[str, Any]) -> None:
    print(f"{'finding kind':26s} {'TP':>4s} {'FN':>4s} {'FP':>4s} {'precision':>9s} {'recall':>7s}")
    for kind, row in summary["per_kind"].items():
        print(
            f"{kind:26s} {row['true_positives']:4d} {row['missed']:4d} {row['false_alarms']:4d}"
            f" {_pct(row['precision']):>9s} {_pct(row['recall']):>7s}"
        )
    overall = summary["overall"]
    print(
        f"{'all':26s} {'':4s} {overall['missed']:4d} {overall['false_alarms']:4d}"
        f" {_pct(overall['precision']):>9s} {_pct(overall['recall']):>7s}"
    )
    spikes = summary["unattributed_spikes"]
    print(
        f"runs: {summary['runs']} ({summary['runs_exact']} exactly right); unattributed spikes"
        f" found (info): {spikes['found']}/{spikes['expected']}"
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, nargs="?", help="folder of labelled run directories")
    parser.add_argument("--generate", type=Path, help="generate the torch corpus into this folder")
    parser.add_argument("--quick", action="store_true", help="the small corpus CI uses")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 unless recall is 1.0 with no false alarms"
    )
    args = parser.parse_args()
    corpus = args.corpus
    if args.generate is not None:
        from scripts.corpus import generate_corpus

        generate_corpus(args.generate, quick=args.quick)
        corpus = args.generate
    if corpus is None:
        parser.error("give CORPUS_DIR or --generate DIR")
    summary = evaluate(corpus)
    print_table(summary)
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2))
    if args.strict and (summary["overall"]["missed"] or summary["overall"]["false_alarms"]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
