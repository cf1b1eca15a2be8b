"""Which findings alert: severities, the identity of an alert, and rule matching."""

from __future__ import annotations

from collections.abc import Iterable

SEVERITIES = ("info", "warning", "critical")
RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
KEY_LENGTH = 120


def finding_key(kind: str, step: int | None, resume_from_step: int | None) -> str:
    """What an alert is about, stable across re-analyses (finding rows are replaced each time):
    the kind and the resume it concerns, else its step."""
    where = resume_from_step if resume_from_step is not None else step
    return f"{kind}:{'run' if where is None else where}"[:KEY_LENGTH]


def matches(kinds: Iterable[str], min_severity: str, kind: str, severity: str) -> bool:
    """A rule with ``kinds`` (empty: every kind) and ``min_severity`` covers this finding."""
    wanted = list(kinds)
    if wanted and kind not in wanted:
        return False
    return RANK.get(severity, -1) >= RANK.get(min_severity, len(SEVERITIES))


def escalates(old: str, new: str) -> bool:
    return RANK.get(new, -1) > RANK.get(old, -1)
