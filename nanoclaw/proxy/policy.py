"""What an agent group may reach through the proxy, as immutable values (pure: no I/O).

An EgressPolicy (hosts a CONNECT tunnel may go to) and CredentialRoutes (where the proxy adds a
host token) make up a group's GroupPolicy. policy_files.py reads and writes the files these come
from; egress.py and credentials.py enforce them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from ..proposal_rules import (HostEntry, RuleError, check_host_entry, check_route_match, check_secret_name,
                              check_upstream)
from .headers import HOP_BY_HOP, RECOMPUTED


@dataclass(frozen=True)
class EgressPolicy:
    """An agent group's allowlist; immutable, so a reload swaps it whole."""
    entries: tuple[HostEntry, ...] = ()

    def as_list(self) -> list[str]:
        return [str(e) for e in self.entries]


HEADER_RE = re.compile(r"^[A-Za-z0-9-]{1,64}$")
DEFAULT_HEADER = "Authorization"
DEFAULT_FORMAT = "Bearer {token}"


@dataclass(frozen=True)
class CredentialRoute:
    match: str          # '/prefix/' or 'host[:port]'
    upstream: str       # https://host[:port][/base]
    secret: str         # host environment variable holding the token
    header: str = DEFAULT_HEADER
    format: str = DEFAULT_FORMAT

    @property
    def by_path(self) -> bool:
        return self.match.startswith("/")

    def describe(self) -> str:
        return (f"{self.match} -> {self.upstream} with {self.header}: "
                f"{self.format.replace('{token}', '$' + self.secret)}")

    def as_dict(self) -> dict:
        return {"match": self.match, "upstream": self.upstream, "secret": self.secret,
                "header": self.header, "format": self.format}


def check_route(data: dict) -> CredentialRoute:
    """One route from its file form; RuleError names what is wrong."""
    if not isinstance(data, dict):
        raise RuleError("a route must be an object")
    header = str(data.get("header") or DEFAULT_HEADER)
    fmt = str(data.get("format") or DEFAULT_FORMAT)
    if not HEADER_RE.match(header) or header.lower() in HOP_BY_HOP | RECOMPUTED:
        raise RuleError(f"{header!r} cannot carry a credential")
    if "{token}" not in fmt or not fmt.isprintable() or len(fmt) > 200:
        raise RuleError("format must be printable text containing {token}")
    return CredentialRoute(check_route_match(str(data.get("match") or "")),
                           check_upstream(str(data.get("upstream") or "")),
                           check_secret_name(str(data.get("secret") or "")), header, fmt)


@dataclass(frozen=True)
class CredentialRoutes:
    routes: tuple[CredentialRoute, ...] = ()

    def for_path(self, path: str) -> CredentialRoute | None:
        """The longest matching prefix, so /api/v2/ wins over /api/."""
        best = None
        for route in self.routes:
            if route.by_path and path.startswith(route.match) and (best is None or len(route.match) > len(best.match)):
                best = route
        return best

    def for_host(self, authority: str) -> CredentialRoute | None:
        """`api.github.com` also answers `api.github.com:80` (what a client sends for http://)."""
        authority = authority.lower().rstrip(".")
        bare = authority[:-3] if authority.endswith(":80") else authority
        for route in self.routes:
            if not route.by_path and route.match in (authority, bare):
                return route
        return None


def parse_routes(data: dict) -> CredentialRoutes:
    if not isinstance(data, dict) or not isinstance(data.get("routes", []), list):
        raise RuleError('the file must be {"routes": [...]}')
    routes, seen = [], set()
    for i, raw in enumerate(data.get("routes", [])):
        try:
            route = check_route(raw)
        except RuleError as exc:
            raise RuleError(f"route {i + 1}: {exc}") from None
        if route.match in seen:
            raise RuleError(f"route {i + 1}: {route.match} is listed twice")
        seen.add(route.match)
        routes.append(route)
    return CredentialRoutes(tuple(routes))


def parse_egress(data) -> EgressPolicy:
    if not isinstance(data, dict) or not isinstance(data.get("allow", []), list):
        raise RuleError('the file must be {"allow": ["host", "host:port", ...]}')
    entries = []
    for i, raw in enumerate(data.get("allow", [])):
        if not isinstance(raw, str):
            raise RuleError(f"entry {i + 1} is not a string")
        try:
            entry = check_host_entry(raw)
        except RuleError as exc:
            raise RuleError(f"entry {i + 1}: {exc}") from None
        if entry not in entries:
            entries.append(entry)
    return EgressPolicy(tuple(entries))


def parse_credentials(data) -> CredentialRoutes:
    return parse_routes(data)


@dataclass(frozen=True)
class GroupPolicy:
    egress: EgressPolicy
    routes: CredentialRoutes


class Policies(Protocol):
    """Where the door looks a group's policy up (policy_files.PolicyStore)."""

    def get(self, folder: str) -> GroupPolicy: ...
