"""The ``runwatch`` command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from app.commands.alerts import alerts_cli
from app.commands.tokens import announce_local_admin, tokens_cli
from app.config import Settings, get_settings

cli = typer.Typer(
    help="Runwatch: experiment tracking that checks resumed runs trained on the right data.",
    no_args_is_help=True,
    add_completion=False,
)
db_cli = typer.Typer(help="Database schema migrations.", no_args_is_help=True)
cli.add_typer(db_cli, name="db")
nodes_cli = typer.Typer(help="Nodes that GPU telemetry is pulled from.", no_args_is_help=True)
cli.add_typer(nodes_cli, name="nodes")
cli.add_typer(tokens_cli, name="tokens")
cli.add_typer(alerts_cli, name="alerts")


def _err(message: str) -> None:
    typer.secho(message, err=True, fg=typer.colors.RED)


def _prepare_database(settings: Settings) -> None:
    """Embedded SQLite is migrated on start; any other database must be migrated explicitly."""
    from app import migrate
    from app.db import get_engine

    engine = get_engine()
    if engine.dialect.name == "sqlite":
        migrate.upgrade(engine)
        return
    current, head = migrate.current_revision(engine), migrate.head_revision(engine)
    if current != head:
        _err(
            f"the database schema is at {current or 'nothing'}, this Runwatch needs {head}:"
            " run `runwatch db upgrade` first"
        )
        raise typer.Exit(2)


@db_cli.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument()] = "head") -> None:
    """Apply migrations up to REVISION (default: the newest)."""
    from app import migrate
    from app.db import get_engine

    migrate.upgrade(get_engine(), revision)
    typer.echo(f"database at revision {migrate.current_revision(get_engine())}")


@db_cli.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Argument()]) -> None:
    """Revert migrations down to REVISION (``base`` empties the database)."""
    from app import migrate
    from app.db import get_engine

    migrate.downgrade(get_engine(), revision)
    typer.echo(f"database at revision {migrate.current_revision(get_engine()) or 'base'}")


@db_cli.command("current")
def db_current() -> None:
    """Print the schema revision of the configured database."""
    from app import migrate
    from app.db import get_engine

    typer.echo(migrate.current_revision(get_engine()) or "base")


@cli.command()
def ingest(
    paths: Annotated[
        list[Path], typer.Argument(help="Run directories, files or .tar/.tar.gz/.zip")
    ],
    project: Annotated[str, typer.Option(help="Project the runs belong to")] = "default",
    run: Annotated[str | None, typer.Option(help="Run name (one PATH only)")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the jobs to finish")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per job (last line)")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait with --wait")] = 3600.0,
) -> None:
    """Queue PATHs for ingestion through the workers; with --wait, report each job's outcome."""
    if run is not None and len(paths) != 1:
        _err("--run names one run: give exactly one PATH")
        raise typer.Exit(2)
    settings = get_settings()
    _prepare_database(settings)
    job_ids = _submit_paths(paths, project=project, run=run, quiet=as_json)
    if not wait:
        if settings.is_embedded_broker and not _embedded_worker_running(settings):
            typer.echo(
                "no worker is running: `runwatch serve` or `runwatch worker` will process the"
                " queue (or pass --wait)"
            )
        return
    with ExitStack() as stack:
        if settings.is_embedded_broker and not _embedded_worker_running(settings):
            from workers.celery_app import celery_app
            from workers.embedded import EmbeddedWorker

            stack.enter_context(EmbeddedWorker(celery_app, settings))
        results = _wait_for_jobs(job_ids, timeout=timeout, show_progress=not as_json)
    failed = 0
    for result in results:
        failed += result["status"] != "succeeded"
        if as_json:
            typer.echo(json.dumps(result))
        else:
            _print_result(result)
    raise typer.Exit(1 if failed else 0)


def _submit_paths(paths: list[Path], *, project: str, run: str | None, quiet: bool) -> list[int]:
    """Keep each source in the store, create its job, and enqueue it after the commit."""
    from app.db import get_engine, session_scope
    from app.ingest.errors import IngestError
    from app.services import ingest as ingest_service
    from workers.tasks import enqueue_ingest

    settings = get_settings()
    job_ids: list[int] = []
    for path in paths:
        try:
            sources = _sources_of(path, settings)
        except IngestError as exc:
            _err(f"cannot ingest {path}: {exc}")
            raise typer.Exit(2) from None
        if run is not None and len(sources) > 1:
            _err(f"{path} holds {len(sources)} W&B runs: --run names one run")
            raise typer.Exit(2)
        for source in sources:
            name = run or source.default_run_name
            with session_scope(get_engine()) as session:
                job = ingest_service.submit(
                    session=session, source=source, project=project, run_name=name
                )
                job_ids.append(job.id)
            enqueue_ingest(job.id)
            if not quiet:
                typer.echo(f"queued job {job.id}: {path} -> {project}/{name}")
    return job_ids


def _sources_of(path: Path, settings: Settings) -> list[Any]:
    """One stored source per run: a folder of W&B runs becomes one source per run id."""
    from app.ingest.errors import Warnings
    from app.ingest.source import DirectoryTree, Limits
    from app.ingest.wandb_run import run_ids
    from app.services.sources import store_directory, store_path

    if path.is_dir():
        limits = Limits(
            settings.max_source_bytes,
            settings.max_archive_members,
            settings.max_compression_ratio,
            settings.max_line_bytes,
        )
        runs = run_ids(DirectoryTree(path, Warnings(), limits))
        if len(runs) > 1:
            return [
                store_directory(
                    path,
                    settings,
                    only=sorted({f.rsplit("/", 1)[0] for f in files}),
                    name=run_id,
                )
                for run_id, files in runs.items()
            ]
    return [store_path(path, settings)]


def _embedded_worker_running(settings: Settings) -> bool:
    from workers.embedded import worker_running

    return worker_running(settings)


def _wait_for_jobs(
    job_ids: list[int], *, timeout: float, show_progress: bool
) -> list[dict[str, Any]]:
    from tqdm import tqdm

    from app.db import get_engine, session_scope
    from app.models import IngestJob
    from app.services.ingest import FINAL_STATES

    deadline = time.monotonic() + timeout
    bars: dict[int, tqdm[Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    hinted = False
    started = time.monotonic()
    try:
        while len(done) < len(job_ids):
            with session_scope(get_engine()) as session:
                for job_id in job_ids:
                    if job_id in done:
                        continue
                    job = session.get(IngestJob, job_id)
                    assert job is not None
                    if show_progress and sys.stderr.isatty():
                        bar = bars.get(job_id)
                        if bar is None:
                            bar = bars[job_id] = tqdm(
                                total=job.progress_total,
                                unit="B",
                                unit_scale=True,
                                desc=f"job {job_id}",
                                leave=False,
                            )
                        bar.n = min(job.progress_done, job.progress_total)
                        bar.set_postfix_str(job.phase or job.state)
                    if job.state in FINAL_STATES:
                        done[job_id] = _job_result(session, job)
            if len(done) == len(job_ids):
                break
            if time.monotonic() > deadline:
                for job_id in job_ids:
                    done.setdefault(job_id, _timeout_result(job_id, timeout))
                break
            if not hinted and time.monotonic() - started > 30 and show_progress:
                typer.echo("still waiting: is a worker running? (`runwatch worker`)", err=True)
                hinted = True
            time.sleep(0.2)
    finally:
        for bar in bars.values():
            bar.close()
    return [done[job_id] for job_id in job_ids]


def _job_result(session: Any, job: Any) -> dict[str, Any]:
    from app.models import Run
    from app.services.findings import finding_dict, list_findings

    run = session.get(Run, job.run_id) if job.run_id is not None else None
    findings = list_findings(session=session, run_id=run.id) if run is not None else []
    return {
        "run_id": job.run_id,
        "job_id": job.id,
        "status": job.state,
        "error": job.error,
        "verdict": run.verdict if run is not None else None,
        "findings": [finding_dict(f) for f in findings],
        "project": job.project,
        "run_name": job.run_name,
        "counts": job.counts or {},
        "warnings": job.warnings or [],
    }


def _timeout_result(job_id: int, timeout: float) -> dict[str, Any]:
    return {
        "run_id": None,
        "job_id": job_id,
        "status": "timeout",
        "error": f"job did not finish within {timeout:.0f} s",
        "verdict": None,
        "findings": [],
    }


def _print_result(result: dict[str, Any]) -> None:
    name = f"{result.get('project')}/{result.get('run_name')}"
    if result["status"] != "succeeded":
        _err(f"job {result['job_id']} {result['status']}: {result['error']}")
    else:
        counts = result.get("counts", {})
        typer.echo(
            f"job {result['job_id']} succeeded: run {result['run_id']} ({name}):"
            f" {counts.get('segments', 0)} segment(s), {counts.get('metric_rows', 0)} metric rows,"
            f" {counts.get('sample_steps', 0)} sample steps, {counts.get('checkpoints', 0)}"
            f" checkpoint(s); verdict {result.get('verdict')}"
        )
        for finding in result.get("findings", []):
            if finding["severity"] != "info":
                typer.echo(f"  {finding['severity']:8s} {finding['kind']}: {finding['message']}")
    for warning in result.get("warnings", []):
        typer.secho(f"  warning: {warning}", err=True, fg=typer.colors.YELLOW)


FAIL_ON = {"warning": ("warn", "fail"), "critical": ("fail",)}


def _open_run(ref: str, *, analyze_if_needed: bool) -> tuple[Any, Any]:
    """Resolve RUN (id, project/name or name); exit 2 when it is not there."""
    from app.db import get_engine, session_factory
    from app.services import analysis as analysis_service
    from app.services.runs import RunNotFound, find_run

    _prepare_database(get_settings())
    session = session_factory(get_engine())()
    try:
        run = find_run(session=session, ref=ref)
    except RunNotFound as exc:
        session.close()
        _err(str(exc))
        raise typer.Exit(2) from None
    if analyze_if_needed and run.verdict is None:
        analysis_service.analyze(session=session, run_id=run.id)
        session.commit()
    return session, run


@cli.command()
def findings(
    run: Annotated[str, typer.Argument(help="Run id, project/name, or a unique name")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
    all_findings: Annotated[bool, typer.Option("--all", help="Include info findings")] = False,
) -> None:
    """List what the analyzers found in RUN."""
    from app.services.findings import finding_dict, list_findings

    session, found = _open_run(run, analyze_if_needed=True)
    with session:
        items = [finding_dict(f) for f in list_findings(session=session, run_id=found.id)]
        if as_json:
            typer.echo(
                json.dumps({"run_id": found.id, "verdict": found.verdict, "findings": items})
            )
            return
        typer.echo(f"run {found.id} {found.project.name}/{found.name}: verdict {found.verdict}")
        for item in items:
            if item["severity"] == "info" and not all_findings:
                continue
            where = f"step {item['step']}" if item["step"] is not None else "run"
            typer.echo(
                f"  {item['severity']:8s} {item['kind']:24s} {where:>10s}  {item['message']}"
            )
            repair = item["evidence"].get("repair")
            if repair:
                typer.echo(f"  {'':8s} {'repair':24s} {'':>10s}  {repair['advice']}")


@cli.command()
def analyze(
    run: Annotated[str, typer.Argument(help="Run id, project/name, or a unique name")],
) -> None:
    """Run the analyzers on RUN again (e.g. after upgrading Runwatch); new findings alert."""
    from app.services import alerts as alert_service
    from app.services import analysis as analysis_service
    from workers.tasks import enqueue_deliveries

    session, found = _open_run(run, analyze_if_needed=False)
    with session:
        report = analysis_service.analyze(session=session, run_id=found.id)
        deliveries = alert_service.evaluate(session=session, run_id=found.id)
        session.commit()
        enqueue_deliveries(deliveries)
        typer.echo(f"run {found.id}: verdict {report.verdict}, {len(report.findings)} finding(s)")


@cli.command()
def check(
    run: Annotated[str, typer.Argument(help="Run id, project/name, or a unique name")],
    fail_on: Annotated[
        str, typer.Option(help="Lowest severity that fails the check: warning or critical")
    ] = "critical",
    checkpoint: Annotated[
        str | None,
        typer.Option(help="Also fail unless this checkpoint (name or step) is safe to promote"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON")] = False,
    server: Annotated[
        str | None,
        typer.Option(envvar="RUNWATCH_SERVER", help="Ask this server instead of the local store"),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(envvar="RUNWATCH_TOKEN", show_default=False, help="API token (--server)"),
    ] = None,
    wait: Annotated[
        float, typer.Option(help="With --server: seconds to wait for a first analysis")
    ] = 0.0,
) -> None:
    """Exit 0 when RUN passes, 1 when it fails at --fail-on (or --checkpoint is not safe),
    2 on usage errors, no such run, or an unreachable server."""
    if fail_on not in FAIL_ON:
        _err("--fail-on must be 'warning' or 'critical'")
        raise typer.Exit(2)
    if server:
        summary = _remote_check(server, token, run, checkpoint, wait)
    else:
        summary = _local_check(run, checkpoint)
    failed = summary["verdict"] in FAIL_ON[fail_on]
    ckpt = summary.get("checkpoint")
    if ckpt is not None and ckpt["safe"] is not True:
        failed = True
    if as_json:
        summary["analyzed_at"] = (
            None if summary["analyzed_at"] is None else str(summary["analyzed_at"])
        )
        summary["fail_on"] = fail_on
        summary["passed"] = not failed
        typer.echo(json.dumps(summary))
    else:
        typer.echo(f"run {summary['run_id']} {summary['name']}: {summary['verdict']}")
        for suspect in summary["suspect_resumes"]:
            for item in suspect["findings"]:
                typer.echo(f"  {item['severity']}: {item['message']}")
            if suspect["repair"]:
                typer.echo(f"  repair: {suspect['repair']['advice']}")
        if ckpt is not None:
            state = {True: "safe", False: "unsafe", None: "not analysed"}[ckpt["safe"]]
            typer.echo(f"  checkpoint {ckpt['name']} (step {ckpt['step']}): {state}")
            for reason in ckpt["reasons"]:
                typer.echo(f"    {reason}")
    raise typer.Exit(1 if failed else 0)


def _local_check(run: str, checkpoint: str | None) -> dict[str, Any]:
    from app.services import runs as run_service
    from app.services.findings import verdict_summary

    session, found = _open_run(run, analyze_if_needed=True)
    with session:
        summary = verdict_summary(session=session, run=found)
        summary["name"] = found.name
        if checkpoint is not None:
            ckpts = run_service.checkpoints(session=session, run_id=found.id)
            match = run_service.find_checkpoint(ckpts, checkpoint)
            if match is None:
                _err(f"run {found.id} has no checkpoint {checkpoint!r}")
                raise typer.Exit(2)
            summary["checkpoint"] = {
                "name": match.name,
                "step": match.step,
                "safe": None if match.verdict is None else match.verdict == "safe",
                "reasons": match.verdict_reasons or [],
            }
    return summary


def _remote_check(
    server: str, token: str | None, run: str, checkpoint: str | None, wait: float
) -> dict[str, Any]:
    from app.commands.remote import RemoteClient, RemoteError

    try:
        with RemoteClient(server, token) as client:
            found = client.find_run(run)
            summary = client.verdict(int(found["id"]), wait=wait)
            summary["name"] = found["name"]
            if checkpoint is not None:
                summary["checkpoint"] = client.checkpoint(int(found["id"]), checkpoint)
    except RemoteError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    return summary


@cli.command()
def watch(
    folders: Annotated[list[Path], typer.Argument(help="Folders holding runs (or runs)")],
    project: Annotated[str, typer.Option(help="Project for the runs found")] = "default",
    interval: Annotated[float, typer.Option(help="Seconds between scans")] = 5.0,
    once: Annotated[
        bool, typer.Option("--once", help="Scan once, wait for the jobs, exit")
    ] = False,
) -> None:
    """Ingest every run under FOLDERS, and again whenever it grows (Ctrl-C stops)."""
    from app.db import get_engine
    from app.services.watch import Watcher
    from workers.tasks import enqueue_ingest

    for folder in folders:
        if not folder.is_dir():
            _err(f"not a folder: {folder}")
            raise typer.Exit(2)
    settings = get_settings()
    _prepare_database(settings)
    watcher = Watcher(
        [f.resolve() for f in folders], project, get_engine(), settings, enqueue_ingest
    )
    with ExitStack() as stack:
        if settings.is_embedded_broker and not _embedded_worker_running(settings):
            from workers.celery_app import celery_app
            from workers.embedded import EmbeddedWorker

            stack.enter_context(EmbeddedWorker(celery_app, settings))
        try:
            while True:
                jobs = watcher.poll()
                for job_id in jobs:
                    typer.echo(f"queued job {job_id}")
                if once:
                    results = _wait_for_jobs(jobs, timeout=3600, show_progress=False)
                    for result in results:
                        _print_result(result)
                    if any(r["status"] != "succeeded" for r in results):
                        raise typer.Exit(1)
                    return
                time.sleep(interval)
        except KeyboardInterrupt:
            typer.echo("stopped watching")


@nodes_cli.command("add")
def nodes_add(
    name: Annotated[str, typer.Argument(help="A unique name (usually the host name)")],
    url: Annotated[str, typer.Argument(help="/metrics URL, or the Prometheus server's URL")],
    kind: Annotated[str, typer.Option(help="dcgm, prometheus or agent")] = "dcgm",
    interval: Annotated[float, typer.Option(help="Seconds between scrapes")] = 5.0,
    query: Annotated[
        str | None, typer.Option(help='prometheus: label matcher, e.g. {Hostname="gpu-1"}')
    ] = None,
) -> None:
    """Register (or update) a node to pull telemetry from."""
    _nodes_upsert(
        [{"name": name, "url": url, "kind": kind, "interval_s": interval, "query": query}]
    )


@nodes_cli.command("import")
def nodes_import(
    path: Annotated[Path, typer.Argument(help="TOML ([[node]] tables) or JSON list of nodes")],
) -> None:
    """Register many nodes from a file; existing ones are updated."""
    from app.services.nodes import NodeError, load_file

    try:
        entries = load_file(path)
    except (NodeError, OSError) as exc:
        _err(str(exc))
        raise typer.Exit(2) from None
    _nodes_upsert(entries)


def _nodes_upsert(entries: list[dict[str, Any]]) -> None:
    from app.db import get_engine, session_scope
    from app.services.nodes import NodeError, upsert

    _prepare_database(get_settings())
    try:
        with session_scope(get_engine()) as session:
            for entry in entries:
                fields = {k: v for k, v in entry.items() if k != "name"}
                node, created = upsert(session=session, name=entry["name"], **fields)
                typer.echo(
                    f"{'added' if created else 'updated'} node {node.name} ({node.kind} {node.url})"
                )
    except NodeError as exc:
        _err(str(exc))
        raise typer.Exit(2) from None


@nodes_cli.command("list")
def nodes_list(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Registered nodes with their last scrape."""
    from sqlalchemy import select

    from app.db import get_engine, session_scope
    from app.models import Node

    _prepare_database(get_settings())
    with session_scope(get_engine()) as session:
        rows = [
            {
                "name": n.name,
                "kind": n.kind,
                "url": n.url,
                "interval_s": n.interval_s,
                "enabled": n.enabled,
                "last_success_at": str(n.last_success_at) if n.last_success_at else None,
                "last_error": n.last_error,
                "failures": n.failures,
            }
            for n in session.scalars(select(Node).order_by(Node.name))
        ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        state = "ok" if not row["failures"] else f"failing x{row['failures']}: {row['last_error']}"
        every = f"every {row['interval_s']:g}s"
        typer.echo(f"{row['name']:24s} {row['kind']:10s} {every}  {row['url']}  {state}")


@nodes_cli.command("rm")
def nodes_rm(name: Annotated[str, typer.Argument()]) -> None:
    """Remove a node and its telemetry."""
    from sqlalchemy import select

    from app.db import get_engine, session_scope
    from app.models import Node

    _prepare_database(get_settings())
    with session_scope(get_engine()) as session:
        node = session.scalars(select(Node).where(Node.name == name)).one_or_none()
        if node is None:
            _err(f"no node named {name!r}")
            raise typer.Exit(2)
        session.delete(node)
    typer.echo(f"removed node {name}")


@cli.command()
def agent(
    port: Annotated[int, typer.Option(help="Port for /metrics")] = 9400,
    host: Annotated[str, typer.Option(help="Interface to listen on")] = "0.0.0.0",
    hostname: Annotated[
        str | None, typer.Option(help="Hostname label (default: this host)")
    ] = None,
    source: Annotated[str, typer.Option(help="auto, nvml, nvidia-smi or none")] = "auto",
) -> None:
    """Serve this node's GPUs as dcgm-exporter-compatible /metrics (for nodes without DCGM)."""
    from app.telemetry.agent import run_agent

    run_agent(host, port, hostname=hostname, source=source)


@cli.command()
def beat(loglevel: Annotated[str, typer.Option()] = "INFO") -> None:
    """Run the scheduler that queues telemetry scrapes (production: exactly one)."""
    from workers.celery_app import celery_app

    settings = get_settings()
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    celery_app.start(["beat", f"--loglevel={loglevel}"])


@cli.command()
def worker(
    concurrency: Annotated[int | None, typer.Option(help="Worker processes")] = None,
    loglevel: Annotated[str, typer.Option()] = "INFO",
    with_beat: Annotated[
        bool, typer.Option("--beat", help="Also run the telemetry scheduler in this worker")
    ] = False,
    queues: Annotated[
        str | None,
        typer.Option(help="Queues to consume, comma-separated: ingest, telemetry, alerts (all)"),
    ] = None,
) -> None:
    """Run a Celery worker (production: start as many as you need, on any machine)."""
    from workers.celery_app import QUEUES, celery_app

    chosen = [q.strip() for q in (queues or ",".join(QUEUES)).split(",") if q.strip()]
    unknown = sorted(set(chosen) - set(QUEUES))
    if unknown or not chosen:
        _err(f"--queues takes some of {', '.join(QUEUES)}; not {', '.join(unknown) or 'nothing'}")
        raise typer.Exit(2)
    settings = get_settings()
    n = concurrency or settings.worker_concurrency
    quiet = ["--quiet"] if loglevel.upper() in ("WARNING", "ERROR", "CRITICAL") else []
    argv = [
        *quiet,
        "worker",
        f"--loglevel={loglevel}",
        "--queues",
        ",".join(chosen),
        "--concurrency",
        str(n),
        "--pool",
        "prefork" if n > 1 else "solo",
        "--hostname",
        f"runwatch-{os.getpid()}@%h",
    ]
    if with_beat:
        settings.resolved_home.mkdir(parents=True, exist_ok=True)
        argv += ["--beat"]
    if settings.is_embedded_broker:
        from workers.embedded import hold_worker_lock

        # keep the handle while the worker runs: closing it (or losing it) releases the lock
        _lock = hold_worker_lock(settings)
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    celery_app.worker_main(argv)


@cli.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Interface to listen on")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on")] = None,
    with_worker: Annotated[
        bool | None,
        typer.Option("--worker/--no-worker", help="Start a worker too (default: embedded mode)"),
    ] = None,
    workers: Annotated[
        int, typer.Option(min=1, max=64, help="API processes (uvicorn workers), one per core")
    ] = 1,
) -> None:
    """Serve the API (and dashboard), with a worker on the embedded default."""
    settings = get_settings()
    _prepare_database(settings)
    start_worker = settings.is_embedded_broker if with_worker is None else with_worker
    host = host or settings.api_host
    port = port or settings.api_port
    announce_local_admin(settings, host, port)
    with _worker_process(start_worker):
        _run_api(host, port, workers)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class _worker_process:
    """A ``runwatch worker`` child process, stopped (by its own pid) when the block ends."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.proc: subprocess.Popen[bytes] | None = None
        self._previous: Any = signal.SIG_DFL

    def __enter__(self) -> _worker_process:
        if self.enabled:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "app", "worker", "--beat", "--loglevel", "WARNING"]
            )
            # uvicorn re-raises SIGTERM after its graceful shutdown: make that unwind through
            # __exit__ (which stops the worker) instead of killing this process and orphaning it
            self._previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            signal.signal(signal.SIGTERM, self._previous)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _run_api(host: str, port: int, workers: int = 1) -> None:
    import uvicorn

    typer.echo(f"Runwatch at http://{host}:{port}  (API docs: http://{host}:{port}/docs)")
    uvicorn.run(
        "app.api.main:create_served_app",
        factory=True,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,  # its lines are INFO, under log_level: not built for every request
        workers=workers,
    )


@cli.command()
def demo(
    port: Annotated[int | None, typer.Option(help="Port to serve on")] = None,
    serve_after: Annotated[
        bool, typer.Option("--serve/--no-serve", help="Serve the dashboard afterwards")
    ] = True,
) -> None:
    """Train a few small models with real faulty resumes, ingest them, and serve."""
    from app.demo import SCENARIOS, generate_run

    settings = get_settings()
    _prepare_database(settings)
    out = settings.resolved_home / "demo-runs"
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    start_time = time.time() - 2 * 3600  # the simulated runs (with their downtimes) end by now
    for name in SCENARIOS:
        started = time.monotonic()
        paths.append(generate_run(name, out, start_time=start_time))
        typer.echo(f"trained {name:<22} {time.monotonic() - started:5.2f} s")
    with _worker_process(settings.is_embedded_broker):
        job_ids = _submit_paths(paths, project="demo", run=None, quiet=True)
        for result in _wait_for_jobs(job_ids, timeout=600, show_progress=True):
            _print_result(result)
        announce_local_admin(settings, settings.api_host, port or settings.api_port)
        if serve_after:
            _run_api(settings.api_host, port or settings.api_port)


def main() -> None:
    cli()
