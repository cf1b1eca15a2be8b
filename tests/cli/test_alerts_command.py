"""`runwatch alerts` as an operator uses it: channels, rules, the test message, silences."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest

from tests.alerts.receivers import http_receiver
from tests.procs import runwatch, runwatch_env

pytestmark = pytest.mark.integration


def test_channels_rules_test_list_and_silence(tmp_path: Path, example_runs: Path) -> None:
    env = runwatch_env(home=str(tmp_path / "home"), webhook_allow_private="true")
    env["HOOK_KEY"] = "cli-secret"
    strict = runwatch_env(home=str(tmp_path / "home"))
    with http_receiver() as receiver:
        added = runwatch(
            "alerts", "channel", "add", "ops", "--kind", "webhook",
            "--url", f"{receiver.url}/hook/TOKENPATH", "--secret-env", "HOOK_KEY",
            env=env,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert "TOKENPATH" not in added.stdout and "cli-secret" not in added.stdout
        listed = runwatch("alerts", "channel", "list", "--json", env=env)
        (channel,) = json.loads(listed.stdout)
        assert channel["target"] == "http://127.0.0.1/…" and channel["has_secret"] is True
        assert "cli-secret" not in listed.stdout and "TOKENPATH" not in listed.stdout

        sent = runwatch("alerts", "test", "ops", env=env)
        assert sent.returncode == 0, sent.stderr
        (request,) = receiver.requests
        assert request.headers["X-Runwatch-Event"] == "test"
        digest = hmac.new(b"cli-secret", request.body, hashlib.sha256).hexdigest()
        assert request.headers["X-Runwatch-Signature"] == f"sha256={digest}"
        refused = runwatch("alerts", "test", "ops", env=strict)  # the default policy
        assert refused.returncode == 1
        assert "internal address" in refused.stderr and "TOKENPATH" not in refused.stderr

        assert runwatch("alerts", "channel", "add", "x", "--kind", "pager", env=env).returncode == 2
        no_url = runwatch("alerts", "channel", "add", "y", "--kind", "slack", env=env)
        assert no_url.returncode == 2 and "URL" in no_url.stderr
        rule = runwatch(
            "alerts", "rule", "add", "--project", "cli", "--channel", "ops",
            "--kind", "resume_data_drift", "--min-severity", "critical",
            env=env,
        )  # fmt: skip
        assert rule.returncode == 0, rule.stderr
        bad = runwatch("alerts", "rule", "add", "--project", "cli", "--channel", "nope", env=env)
        assert bad.returncode == 2
        rules = json.loads(runwatch("alerts", "rule", "list", "--json", env=env).stdout)
        assert [(r["project"], r["kinds"], r["channel"]) for r in rules] == [
            ("cli", ["resume_data_drift"], "ops")
        ]

        ingested = runwatch(
            "ingest", str(example_runs / "megatron_offset"), "--project", "cli", "--wait",
            env=env,
        )  # fmt: skip
        assert ingested.returncode == 0, ingested.stderr
        alerts = json.loads(
            runwatch("alerts", "list", "--run", "cli/megatron_offset", "--json", env=env).stdout
        )
        (alert,) = alerts
        assert (alert["kind"], alert["severity"], alert["step"]) == (
            "resume_data_drift",
            "critical",
            301,
        )
        assert [d["channel"] for d in alert["deliveries"]] == ["ops"]
        table = runwatch("alerts", "list", "--project", "cli", env=env).stdout
        assert "cli/megatron_offset" in table and "resume_data_drift" in table

    silenced = runwatch(
        "alerts", "silence", "cli/megatron_offset", "--for", "2h", "--reason", "known", env=env
    )
    assert silenced.returncode == 0 and "until 20" in silenced.stdout
    forever = runwatch("alerts", "silence", "1", env=env)
    assert "until unsilenced" in forever.stdout
    assert runwatch("alerts", "silence", "1", "--for", "soon", env=env).returncode == 2
    assert runwatch("alerts", "silence", "cli/nope", env=env).returncode == 2
    assert "unsilenced" in runwatch("alerts", "unsilence", "1", env=env).stdout
    assert "was not silenced" in runwatch("alerts", "unsilence", "1", env=env).stdout

    assert runwatch("alerts", "rule", "rm", str(rules[0]["id"]), env=env).returncode == 0
    assert runwatch("alerts", "rule", "rm", "999", env=env).returncode == 2
    assert runwatch("alerts", "channel", "rm", "ops", env=env).returncode == 0
    assert json.loads(runwatch("alerts", "channel", "list", "--json", env=env).stdout) == []


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("30m", 30), ("2h", 120), ("1d", 1440), ("90s", 2), ("1.5h", 90), ("forever", None)],
)
def test_durations(text: str, minutes: int | None) -> None:
    from app.commands.alerts import parse_duration

    assert parse_duration(text) == minutes


def test_bad_durations() -> None:
    from app.commands.alerts import parse_duration

    for text in ("soon", "0m", "-1h", "2 weeks"):
        with pytest.raises(ValueError):
            parse_duration(text)
