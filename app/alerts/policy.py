"""Where a webhook may go: http(s) only, and not to internal addresses unless allowed.

The host is resolved when the alert is sent and every address it resolves to is checked; the
request then connects to the checked address (so a DNS answer that changes between the check
and the connection cannot redirect it). Loopback, private, link-local (cloud metadata),
multicast, reserved and unspecified addresses, and names such as ``localhost`` or
``metadata.google.internal``, are refused unless ``allow_private`` is set or the host or one of
its addresses is in ``allow_hosts``. ``deny_hosts`` always wins.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

SCHEMES = {"http": 80, "https": 443}
INTERNAL_NAMES = frozenset(
    {
        "localhost",
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)


class TargetRefused(Exception):
    """The policy does not let an alert go to this URL (a setting, not a transient failure)."""


def redact(url: str | None) -> str:
    """Only scheme and host: webhook paths (Slack's above all) are secrets."""
    if not url:
        return ""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return "…"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}/…" if parts.scheme else "…"


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Target:
    """A checked URL and the address to connect to."""

    scheme: str
    host: str  # as written, lower case, for Host / SNI
    port: int
    address: str
    path: str  # path and query

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == SCHEMES[self.scheme] else f"{host}:{self.port}"

    @property
    def pinned_url(self) -> str:
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.scheme}://{address}:{self.port}{self.path}"


def _parse_entries(entries: Iterable[str]) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    names: set[str] = set()
    networks: list[IPNetwork] = []
    for raw in entries:
        entry = raw.strip().lower().rstrip(".")
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
        except ValueError:
            names.add(entry)
    return frozenset(names), tuple(networks)


def _name_matches(host: str, names: frozenset[str]) -> bool:
    """Exact names, and ``*.example.com`` / ``.example.com`` for every subdomain."""
    for name in names:
        suffix = name.removeprefix("*")
        if host == name or (suffix.startswith(".") and host.endswith(suffix)):
            return True
    return False


def _address(text: str) -> IPAddress:
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_internal(address: IPAddress) -> bool:
    return (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


class TargetPolicy:
    def __init__(
        self,
        *,
        allow_private: bool = False,
        allow_hosts: Iterable[str] = (),
        deny_hosts: Iterable[str] = (),
        resolver: Resolver = system_resolver,
    ) -> None:
        self.allow_private = allow_private
        self.allow_names, self.allow_networks = _parse_entries(allow_hosts)
        self.deny_names, self.deny_networks = _parse_entries(deny_hosts)
        self.resolver = resolver

    def check(self, url: str) -> Target:
        """The target to connect to, or ``TargetRefused`` saying why not (never the path)."""
        try:
            parts = urlsplit(url)
            scheme, host, port = parts.scheme.lower(), parts.hostname, parts.port
        except ValueError:
            raise TargetRefused("not a valid URL") from None
        if scheme not in SCHEMES:
            raise TargetRefused(f"only http and https webhooks are allowed, not {scheme or '?'}")
        if not host:
            raise TargetRefused("the URL has no host")
        host = host.lower().rstrip(".")
        port = port or SCHEMES[scheme]
        shown = f"{scheme}://{host}"
        if _name_matches(host, self.deny_names):
            raise TargetRefused(f"{shown} is denied by webhook_deny_hosts")
        try:
            addresses = [_address(a) for a in self._resolve(host, port)]
        except (OSError, UnicodeError) as exc:
            raise TargetRefused(f"{shown} does not resolve: {exc}") from None
        if not addresses:
            raise TargetRefused(f"{shown} does not resolve")
        for address in addresses:
            if any(address in net for net in self.deny_networks):
                raise TargetRefused(f"{shown} ({address}) is denied by webhook_deny_hosts")
        if not self._allowed(host, addresses):
            raise TargetRefused(
                f"{shown} is an internal address; set RUNWATCH_WEBHOOK_ALLOW_HOSTS (or"
                " RUNWATCH_WEBHOOK_ALLOW_PRIVATE) to allow it"
            )
        path = parts.path or "/"
        if parts.query:
            path += f"?{parts.query}"
        return Target(scheme, host, port, str(addresses[0]), path)

    def _resolve(self, host: str, port: int) -> list[str]:
        try:
            return [str(_address(host.strip("[]")))]
        except ValueError:
            return self.resolver(host, port)

    def _allowed(self, host: str, addresses: list[IPAddress]) -> bool:
        if self.allow_private or _name_matches(host, self.allow_names):
            return True
        internal_name = host in INTERNAL_NAMES or host.endswith((".localhost", ".internal"))
        for address in addresses:
            allowed = any(address in net for net in self.allow_networks)
            if (internal_name or is_internal(address)) and not allowed:
                return False
        return True
