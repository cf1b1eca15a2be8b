"""Asking a Runwatch server (not the local database) for a run's verdict: ``runwatch check
--server URL``. The token comes from ``RUNWATCH_TOKEN``; errors carry the server's message."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import httpx


class RemoteError(Exception):
    """The server could not be reached, refused the request, or has no such run."""


class RemoteClient:
    def __init__(self, server: str, token: str | None, *, timeout: float = 30.0) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.server = server.rstrip("/")
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout)

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        try:
            response = self._http.get(
                path, params={k: v for k, v in params.items() if v is not None}
            )
        except httpx.HTTPError as exc:
            raise RemoteError(f"cannot reach {self.server}: {exc}") from None
        if response.status_code >= 400:
            raise RemoteError(
                f"{self.server}{path}: HTTP {response.status_code}: {_message(response)}"
            )
        return response.json()

    def find_run(self, ref: str) -> dict[str, Any]:
        """A run by id, ``project/name`` or a name unique across projects."""
        if ref.isdigit():
            return dict(self.get(f"/api/v1/runs/{ref}"))
        project, name = ref.split("/", 1) if "/" in ref else (None, ref)
        page = self.get("/api/v1/runs", project=project, name=name, limit=2)
        items = page.get("items") or []
        if not items:
            raise RemoteError(f"no run named {ref!r} on {self.server}")
        if len(items) > 1:
            raise RemoteError(f"several runs are named {ref!r}: use project/name or the run id")
        return dict(items[0])

    def verdict(self, run_id: int, *, wait: float = 0.0, poll: float = 2.0) -> dict[str, Any]:
        """The run's verdict summary, waiting up to ``wait`` seconds for its first analysis."""
        deadline = time.monotonic() + wait
        while True:
            summary = dict(self.get(f"/api/v1/runs/{run_id}/verdict"))
            if summary.get("verdict") is not None or time.monotonic() >= deadline:
                return summary
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))

    def checkpoint(self, run_id: int, ref: str) -> dict[str, Any]:
        answer = self.get(f"/api/v1/runs/{run_id}/checkpoints/{quote(ref, safe='')}")
        ckpt = answer["checkpoint"]
        return {
            "name": ckpt["name"],
            "step": ckpt["step"],
            "safe": answer["safe"],
            "reasons": answer["reasons"],
        }


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return str(body)[:200]
