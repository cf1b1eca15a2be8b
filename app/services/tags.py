"""Run tags: labels users filter runs by (``baseline``, ``7b``, ``resumed``).

Tags come from the source (``config["tags"]``, e.g. W&B or the logger's config) and from the
API. Re-ingesting a run adds its source tags and never removes tags set through the API.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.models import RunTag

MAX_TAG_LENGTH = 100
MAX_TAGS = 100
_VALID = re.compile(r"^[^\x00-\x1f\x7f]+$")


class TagError(ValueError):
    pass


def normalize(tag: str) -> str:
    tag = tag.strip()
    if not tag or len(tag) > MAX_TAG_LENGTH or not _VALID.match(tag):
        raise TagError(
            f"a tag is 1 to {MAX_TAG_LENGTH} printable characters, not {tag[:MAX_TAG_LENGTH]!r}"
        )
    return tag


def source_tags(config: dict[str, Any]) -> list[str]:
    """Tags a source declared in its config; anything malformed is ignored."""
    raw = config.get("tags") if isinstance(config, dict) else None
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    tags = []
    for item in raw[:MAX_TAGS]:
        if isinstance(item, str):
            try:
                tags.append(normalize(item))
            except TagError:
                continue
    return tags


def tags_of(session: Session, run_id: int) -> list[str]:
    return list(
        session.scalars(select(RunTag.tag).where(RunTag.run_id == run_id).order_by(RunTag.tag))
    )


def tags_by_run(session: Session, run_ids: list[int]) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    if run_ids:
        rows = session.execute(
            select(RunTag.run_id, RunTag.tag).where(RunTag.run_id.in_(run_ids)).order_by(RunTag.tag)
        )
        for run_id, tag in rows:
            found.setdefault(run_id, []).append(tag)
    return found


def add_tags(session: Session, run_id: int, tags: Iterable[str]) -> None:
    have = set(tags_of(session, run_id))
    wanted = [t for t in dict.fromkeys(normalize(t) for t in tags) if t not in have]
    if len(have) + len(wanted) > MAX_TAGS:
        raise TagError(f"a run has at most {MAX_TAGS} tags")
    session.add_all(RunTag(run_id=run_id, tag=t) for t in wanted)
    session.flush()


def remove_tags(session: Session, run_id: int, tags: Iterable[str]) -> None:
    names = [t.strip() for t in tags]
    if names:
        session.execute(delete(RunTag).where(RunTag.run_id == run_id, RunTag.tag.in_(names)))
        session.flush()
