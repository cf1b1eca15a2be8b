"""Read docker/compose.yaml the way Compose does, for the tests: YAML with anchors and merge
keys, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` filled in from an env file."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"
ENV_EXAMPLE = DOCKER_DIR / ".env.example"
DOCKERFILE = DOCKER_DIR / "Dockerfile"

_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


class MissingVariable(ValueError):
    pass


def read_env_file(path: Path = ENV_EXAMPLE) -> dict[str, str]:
    """``KEY=VALUE`` lines; blank lines and comments skipped."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def variables(text: str) -> set[str]:
    """Every variable a Compose file refers to."""
    return {
        m.group("braced") or m.group("bare")
        for m in _VARIABLE.finditer(text)
        if not m.group("escaped")
    }


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def fill(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("bare")
        op, arg, current = m.group("op") or "", m.group("arg") or "", env.get(name)
        unset = not current if op.startswith(":") else current is None
        if op.endswith("-"):
            return arg if unset else str(current)
        if op.endswith("?") and unset:
            raise MissingVariable(arg or f"{name} is required")
        return current or ""

    return _VARIABLE.sub(fill, value)


def load_raw(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The file as YAML (aliases stay the same Python objects), nothing filled in."""
    return dict(yaml.safe_load(path.read_text()))


def load(env: Mapping[str, str], path: Path = COMPOSE_FILE) -> dict[str, Any]:
    return dict(interpolate(load_raw(path), env))


@dataclass
class Service:
    name: str
    config: dict[str, Any]

    @property
    def command(self) -> list[str]:
        command = self.config.get("command", [])
        return shlex.split(command) if isinstance(command, str) else [str(c) for c in command]

    @property
    def replicas(self) -> int:
        return int(self.config.get("deploy", {}).get("replicas", 1))

    @property
    def environment(self) -> dict[str, str]:
        env = self.config.get("environment", {})
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        return {k: str(v) for k, v in env.items()}

    def mounts(self) -> dict[str, str]:
        """Volume name (or host path) -> path in the container."""
        out = {}
        for volume in self.config.get("volumes", []):
            if isinstance(volume, dict):
                out[str(volume["source"])] = str(volume["target"])
            else:
                source, target = str(volume).split(":")[:2]
                out[source] = target
        return out


def runwatch_services(compose: Mapping[str, Any]) -> dict[str, Service]:
    """The services that run the Runwatch image (the one that ``migrate`` builds)."""
    services = compose["services"]
    image = services["migrate"]["image"]
    return {
        name: Service(name, config)
        for name, config in services.items()
        if config.get("image") == image
    }


@dataclass
class Dockerfile:
    instructions: list[tuple[str, str]]

    @classmethod
    def read(cls, path: Path = DOCKERFILE) -> Dockerfile:
        text = re.sub(r"\\\n\s*", " ", path.read_text())  # join continued lines
        out = []
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                keyword, _, rest = line.partition(" ")
                out.append((keyword.upper(), rest.strip()))
        return cls(out)

    def all(self, keyword: str) -> list[str]:
        return [rest for key, rest in self.instructions if key == keyword]

    def last(self, keyword: str) -> str:
        return self.all(keyword)[-1]

    def exec_form(self, keyword: str) -> list[str]:
        """The JSON array of the last ENTRYPOINT or CMD."""
        return [str(word) for word in json.loads(self.last(keyword))]

    def healthcheck_command(self) -> list[str]:
        """The command of ``HEALTHCHECK [options] CMD [...]``."""
        _, _, command = self.last("HEALTHCHECK").partition(" CMD ")
        return [str(word) for word in json.loads(command)]

    def env(self) -> dict[str, str]:
        out = {}
        for rest in self.all("ENV"):
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                out[key] = value
        return out
