"""docker/compose.yaml, docker/.env.example and docker/Dockerfile say only true things: every
command is a real `runwatch` command with options it takes, every RUNWATCH_* variable is a
setting, the migration gates everything, each queue has a consumer and there is one beat.
(No Docker engine is needed; `docker compose config` runs too where a Compose client exists.)"""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.config import Settings
from tests.deploy.compose import (
    COMPOSE_FILE,
    DOCKER_DIR,
    ENV_EXAMPLE,
    Dockerfile,
    MissingVariable,
    Service,
    load,
    load_raw,
    read_env_file,
    runwatch_services,
    variables,
)
from workers.celery_app import QUEUES, celery_app

ROOT = DOCKER_DIR.parent
RUNWATCH_VARIABLE = re.compile(r"\bRUNWATCH_[A-Z0-9_]+")


@pytest.fixture(scope="module")
def compose() -> dict:
    return load(read_env_file())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict[str, Service]:
    return runwatch_services(compose)


def test_every_variable_has_a_line_in_the_example_env() -> None:
    assert variables(COMPOSE_FILE.read_text()) <= set(read_env_file())
    with pytest.raises(MissingVariable, match="POSTGRES_PASSWORD"):
        load({})  # no password, no stack


def test_runwatch_services_share_one_image_and_one_environment(
    services: dict[str, Service],
) -> None:
    assert set(services) == {
        "migrate",
        "api",
        "worker",
        "telemetry-worker",
        "alerts-worker",
        "beat",
    }
    raw = load_raw()
    anchor = raw["x-runwatch-env"]
    for name in services:  # the same YAML node, not a copy that could drift
        assert raw["services"][name]["environment"] is anchor, name
        assert raw["services"][name]["env_file"] == ".env", name
    assert [n for n, s in raw["services"].items() if "build" in s] == ["migrate"]
    build = raw["services"]["migrate"]["build"]
    assert (DOCKER_DIR / build["context"] / build["dockerfile"]).resolve() == (
        DOCKER_DIR / "Dockerfile"
    )


def test_migrate_is_one_shot_and_gates_the_rest(services: dict[str, Service]) -> None:
    migrate, others = services["migrate"], {n: s for n, s in services.items() if n != "migrate"}
    assert migrate.command == ["db", "upgrade"]
    assert migrate.config["restart"] == "no" and migrate.replicas == 1
    assert migrate.config["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name, service in others.items():
        depends = service.config["depends_on"]
        assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        assert depends["redis"] == {"condition": "service_healthy"}, name
        assert service.config["restart"] == "unless-stopped", name


def test_health_checks(compose: dict, services: dict[str, Service]) -> None:
    postgres, redis = compose["services"]["postgres"], compose["services"]["redis"]
    assert postgres["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    api_check = services["api"].config["healthcheck"]["test"]
    assert api_check == ["CMD", *Dockerfile.read().healthcheck_command()]
    assert "/api/v1/health" in api_check[-1]
    for name in ("migrate", "worker", "telemetry-worker", "alerts-worker", "beat"):
        assert services[name].config["healthcheck"] == {"disable": True}, name


def test_one_beat_and_every_queue_consumed(services: dict[str, Service]) -> None:
    beats = [s for s in services.values() if s.command[0] == "beat" or "--beat" in s.command]
    assert [(s.name, s.replicas) for s in beats] == [("beat", 1)]
    consumed: dict[str, list[str]] = {}
    for service in services.values():
        if service.command[0] == "worker":
            queues = service.command[service.command.index("--queues") + 1].split(",")
            for queue in queues:
                consumed.setdefault(queue, []).append(service.name)
    assert consumed == {
        "ingest": ["worker"],
        "telemetry": ["telemetry-worker"],
        "alerts": ["alerts-worker"],
    }
    routed = {route["queue"] for route in celery_app.conf.task_routes.values()}
    assert routed == set(QUEUES) == set(consumed)
    assert services["worker"].replicas == 2  # INGEST_WORKERS in .env.example


def test_volumes_declared_and_sources_shared(compose: dict, services: dict) -> None:
    declared = set(compose["volumes"])
    used: dict[str, set[str]] = {}
    for name, config in compose["services"].items():
        for source, target in Service(name, config).mounts().items():
            assert source in declared, (name, source)  # named volumes only, no host paths
            used.setdefault(source, set()).add(target)
    assert set(used) == declared
    assert used["pgdata"] == {"/var/lib/postgresql/data"}
    assert used["redisdata"] == {"/data"}
    source_dir = services["api"].environment["RUNWATCH_SOURCE_DIR"]
    assert used["sources"] == {source_dir}
    # uploads and live batches land in the store on the API; ingest workers read them there
    assert "sources" in services["api"].mounts() and "sources" in services["worker"].mounts()
    assert source_dir == Dockerfile.read().env()["RUNWATCH_SOURCE_DIR"]


def commands_in_the_files(services: dict[str, Service]) -> list[list[str]]:
    commands = [s.command for s in services.values()]
    dockerfile = Dockerfile.read()
    commands.append(dockerfile.exec_form("CMD"))
    documented = re.findall(r"run --rm api (.+)", COMPOSE_FILE.read_text())
    assert documented, "the header shows how to make the admin token"
    commands += [line.split() for line in documented]
    return commands


def test_every_command_is_a_real_runwatch_command(services: dict[str, Service]) -> None:
    runner = CliRunner()
    for argv in commands_in_the_files(services):
        parsed = runner.invoke(cli, [*argv, "--help"])  # parses every option, runs nothing
        assert parsed.exit_code == 0, (argv, parsed.output)
        usage = next(line for line in parsed.output.splitlines() if "Usage:" in line)
        words = [w for w in argv if not w.startswith("-")]
        assert argv[0] in usage.split(), (argv, usage)
        if argv[0] in ("db", "tokens"):
            assert words[1] in usage.split(), (argv, usage)


def test_worker_refuses_an_unknown_queue() -> None:
    refused = CliRunner().invoke(cli, ["worker", "--queues", "ingest,nope"])
    assert refused.exit_code == 2
    assert "nope" in refused.output


def test_every_runwatch_variable_is_a_setting(services: dict[str, Service]) -> None:
    named: set[str] = set()
    for path in (COMPOSE_FILE, ENV_EXAMPLE, DOCKER_DIR / "Dockerfile"):
        named |= set(RUNWATCH_VARIABLE.findall(path.read_text()))
    fields = {f"RUNWATCH_{name.upper()}" for name in Settings.model_fields}
    assert named - fields == set()
    # and the values given are valid for those settings
    values = {**Dockerfile.read().env(), **read_env_file(), **services["api"].environment}
    settings = {k[len("RUNWATCH_") :].lower(): v for k, v in values.items() if k in fields}
    loaded = Settings.model_validate(settings)
    assert loaded.broker_url == "redis://redis:6379/0"
    assert loaded.sqlalchemy_url.startswith("postgresql+psycopg://runwatch:")


def test_dockerfile_builds_what_the_package_needs() -> None:
    dockerfile = Dockerfile.read()
    bases = dockerfile.all("FROM")
    assert [b.split()[0] for b in bases] == ["python:3.11-slim", "python:3.11-slim"]
    assert dockerfile.last("USER") not in ("root", "0")
    assert dockerfile.exec_form("ENTRYPOINT") == ["runwatch"]
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["runwatch"] == "app.cli:main"
    copied = {part.rstrip("/") for rest in dockerfile.all("COPY") for part in rest.split()[:-1]}
    found = pyproject["tool"]["setuptools"]["packages"]["find"]
    packages = {p.rstrip("*") for p in found["include"]}
    assert packages <= copied  # every package, and what the build reads
    assert {"pyproject.toml", "README.md"} <= copied
    for path in copied - {"--from=build", "/opt/runwatch"}:
        assert (ROOT / path).exists(), path
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()
    }
    assert not copied & ignored
    assert {".git", ".venv", ".runwatch", "artifacts", "tests"} <= ignored
    installs = [r for r in dockerfile.all("RUN") if "pip install" in r]
    assert installs == ["/opt/runwatch/bin/pip install ."]  # no extras: torch, tools, dev
    assert "RUNWATCH_HOME" in dockerfile.env() and "8765" in dockerfile.all("EXPOSE")
    assert str(Settings.model_fields["api_port"].default) == "8765"


def test_health_check_path_is_served() -> None:
    from app.api.main import create_app

    paths = {getattr(route, "path", None) for route in create_app(mount_dashboard=False).routes}
    command = Dockerfile.read().healthcheck_command()
    (path,) = re.findall(r"'(/api/[^']+)'", command[-1])
    assert path in paths


def test_compose_client_accepts_the_file(tmp_path: Path) -> None:
    """Where a Compose client is installed: Compose v2, or v1 (which predates the top-level
    `name`, so it reads a copy without that line)."""
    text = COMPOSE_FILE.read_text()
    if shutil.which("docker") and _ok(["docker", "compose", "version"]):
        argv = ["docker", "compose"]
    elif shutil.which("docker-compose"):
        argv = ["docker-compose"]
        text = re.sub(r"(?m)^name: .*\n", "", text)
    else:
        pytest.skip("no Compose client here (docker compose, docker-compose)")
    compose_file = tmp_path / "docker" / "compose.yaml"
    compose_file.parent.mkdir()
    compose_file.write_text(text)
    shutil.copy(ENV_EXAMPLE, compose_file.parent / ".env")  # as the quick start has it
    checked = subprocess.run(
        [*argv, "-f", str(compose_file), "config"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    assert "service_completed_successfully" in checked.stdout


def _ok(argv: list[str]) -> bool:
    return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
