"""What the model route knows of upstreams and agents' models, read on use like the policy files: the
registry (data/policy/upstreams.json) and each agent's choice (data/policy/<folder>/model.json),
re-read when a file changes, the last good one kept when a file is broken (reported once). Each
upstream has its pooled connection, its credential (the host's default key, or its secret read
from the environment at the moment of the call) and its price table."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

import requests

from ..proposal_rules import RuleError
from ..upstreams import chains, registry
from ..upstreams.chains import AgentModel
from ..upstreams.registry import DEFAULT, Upstream
from ..usage import prices
from .host_secrets import HostSecrets
from .headers import credential_headers

log = logging.getLogger("nanoclaw.proxy")


def _stamp(path: Path):
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        return ("unreadable",)
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class Target:
    """Where one link of a chain goes: its upstream's URL, credential and price table."""
    upstream: str
    url: str
    credential: dict[str, str]
    table: dict
    free: bool
    default: bool  # the default upstream: the OAuth beta rules of the host's own key apply


class UpstreamBook:
    def __init__(self, settings, default_table: dict, make_session, secrets=None):
        self.settings = settings
        self.policy_dir = Path(settings.data_dir) / "policy"
        self.default_table = default_table
        self.default_credential = credential_headers(settings.anthropic_api_key, settings.claude_code_oauth_token)
        self.default_url = settings.anthropic_upstream_url.rstrip("/")
        self.secrets = secrets or HostSecrets()
        self._make_session = make_session
        self._sessions: dict[str, requests.Session] = {}
        self._lock = threading.Lock()
        self._registry: tuple = (object(), {})          # (stamp, upstreams)
        self._choices: dict[str, tuple] = {}            # folder -> (registry stamp, file stamp, choice)
        self._broken: set[tuple] = set()

    # -- files -----------------------------------------------------------------------------------
    def upstreams(self) -> dict[str, Upstream]:
        path = registry.path_of(self.policy_dir)
        now = _stamp(path)
        stamp, found = self._registry
        if now == stamp:
            return found
        try:
            found = registry.read(self.policy_dir)
        except RuleError as exc:
            self._report(("registry", now), f"{path.name} is invalid, the previous upstreams stay: {exc}")
        self._registry = (now, found)
        return found

    def choice(self, folder: str) -> AgentModel | None:
        """The agent's model and fallbacks (None: the defaults)."""
        upstreams = self.upstreams()
        path = chains.path_of(self.policy_dir, folder)
        key = (self._registry[0], _stamp(path))
        kept = self._choices.get(folder)
        if kept is not None and kept[0] == key:
            return kept[1]
        previous = kept[1] if kept else None
        try:
            found = chains.read(self.policy_dir, folder, upstreams)
        except RuleError as exc:
            self._report((folder, key), f"{folder}'s {path.name} is invalid, its previous choice stays: {exc}")
            found = previous
        self._choices[folder] = (key, found)
        return found

    def _report(self, key: tuple, text: str) -> None:
        if key not in self._broken:
            self._broken.add(key)
            log.error("proxy: %s", text)

    # -- targets ---------------------------------------------------------------------------------
    def target(self, name: str) -> Target | None:
        if name == DEFAULT:
            return Target(DEFAULT, self.default_url, self.default_credential, self.default_table, False, True)
        upstream = self.upstreams().get(name)
        if upstream is None:
            return None
        credential: dict[str, str] = {}
        if upstream.auth != "none":
            value = self.secrets(upstream.secret) or ""
            credential = {"x-api-key": value} if upstream.auth == "x-api-key" else {"authorization": f"Bearer {value}"}
        table = registry.price_table(self.policy_dir, upstream, self.default_table)
        return Target(name, upstream.url, credential, table, upstream.free, False)

    def session(self, url: str) -> requests.Session:
        with self._lock:
            if url not in self._sessions:
                self._sessions[url] = self._make_session(url)
            return self._sessions[url]

    def free_upstreams(self) -> set[str]:
        return {name for name, u in self.upstreams().items() if u.free}

    def reservation_price(self, choice: AgentModel | None, links) -> prices.Price:
        """The dearest price any of these links may cost (free upstreams cost nothing)."""
        if choice is None:
            return prices.dearest(self.default_table)
        best = prices.Price("free", {}, True)
        for link in links:
            target = self.target(link.upstream)
            if target is None or target.free:
                continue
            price = prices.price_for(link.model, "", target.table)
            if (price.rates.get("output", 0), price.rates.get("input", 0)) > \
                    (best.rates.get("output", 0), best.rates.get("input", 0)):
                best = price
        return best

    def close(self) -> None:
        with self._lock:
            for session in self._sessions.values():
                session.close()
            self._sessions.clear()
