"""Webhook targets: internal addresses refused unless allowed, deny lists always win."""

from __future__ import annotations

import pytest

from app.alerts.policy import TargetPolicy, TargetRefused, redact

DNS = {
    "hooks.example.com": ["93.184.216.34"],
    "metadata.google.internal": ["169.254.169.254"],
    "localhost": ["127.0.0.1"],
    "rebind.example.com": ["93.184.216.34", "10.0.0.5"],
    "intranet.example.com": ["10.1.2.3"],
    "v6.example.com": ["2606:2800:220:1:248:1893:25c8:1946"],
}


def fake_dns(host: str, port: int) -> list[str]:
    if host not in DNS:
        raise OSError("Name or service not known")
    return DNS[host]


def policy(**kwargs: object) -> TargetPolicy:
    return TargetPolicy(resolver=fake_dns, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://127.1.2.3/hook",
        "http://10.0.0.1/hook",
        "http://172.16.5.4/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fe80::1]/hook",
        "http://[fd00::1]/hook",
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
        "http://100.64.0.1/hook",
        "http://240.0.0.1/hook",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://localhost:8765/api",
        "https://rebind.example.com/hook",
        "http://intranet.example.com/hook",
    ],
)
def test_internal_targets_are_refused_by_default(url: str) -> None:
    with pytest.raises(TargetRefused, match="internal address"):
        policy().check(url)


def test_public_target_connects_to_the_checked_address() -> None:
    target = policy().check("https://hooks.example.com/services/T0/B0/secret?x=1")
    assert target.address == "93.184.216.34"
    assert target.pinned_url == "https://93.184.216.34:443/services/T0/B0/secret?x=1"
    assert target.host_header == "hooks.example.com"
    v6 = policy().check("http://v6.example.com:8080/")
    assert v6.pinned_url == "http://[2606:2800:220:1:248:1893:25c8:1946]:8080/"
    assert v6.host_header == "v6.example.com:8080"


def test_allow_private_and_allow_lists() -> None:
    assert policy(allow_private=True).check("http://127.0.0.1:9/h").address == "127.0.0.1"
    assert policy(allow_private=True).check("http://[::1]:9/h").address == "::1"
    by_cidr = policy(allow_hosts=["10.1.2.0/24"])
    assert by_cidr.check("http://intranet.example.com/h").address == "10.1.2.3"
    with pytest.raises(TargetRefused):
        by_cidr.check("http://10.1.3.1/h")
    by_name = policy(allow_hosts=["intranet.example.com"])
    assert by_name.check("http://intranet.example.com/h").address == "10.1.2.3"
    by_wildcard = policy(allow_hosts=["*.example.com"])
    assert by_wildcard.check("http://intranet.example.com/h").address == "10.1.2.3"
    with pytest.raises(TargetRefused):
        by_wildcard.check("http://metadata.google.internal/")


def test_deny_always_wins() -> None:
    everything = {"allow_private": True, "allow_hosts": ["0.0.0.0/0", "hooks.example.com"]}
    with pytest.raises(TargetRefused, match="webhook_deny_hosts"):
        policy(**everything, deny_hosts=["127.0.0.0/8"]).check("http://127.0.0.1/h")
    with pytest.raises(TargetRefused, match="webhook_deny_hosts"):
        policy(**everything, deny_hosts=["hooks.example.com"]).check("https://hooks.example.com/")
    with pytest.raises(TargetRefused, match="webhook_deny_hosts"):
        policy(deny_hosts=["*.example.com"]).check("https://hooks.example.com/")
    with pytest.raises(TargetRefused, match="webhook_deny_hosts"):  # by the address it resolves to
        policy(deny_hosts=["93.184.216.0/24"]).check("https://hooks.example.com/")
    assert policy(deny_hosts=["other.example.com"]).check("https://hooks.example.com/")


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://hooks.example.com/x", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://127.0.0.1/", "only http and https"),
        ("http:///nohost", "no host"),
        ("http://unknown.example.com/", "does not resolve"),
    ],
)
def test_bad_urls(url: str, why: str) -> None:
    with pytest.raises(TargetRefused, match=why):
        policy(allow_private=True).check(url)


def test_refusals_and_redaction_never_show_the_path() -> None:
    secret_url = "https://localhost/services/T000/B000/XXXXSECRET"
    with pytest.raises(TargetRefused) as refused:
        policy().check(secret_url)
    assert "XXXXSECRET" not in str(refused.value)
    assert redact("https://hooks.slack.com/services/T0/B0/XXXX") == "https://hooks.slack.com/…"
    assert redact("http://user:pw@[::1]:8080/x?token=1") == "http://[::1]/…"
    assert redact(None) == ""
