"""An agent's model and its fallbacks, as a chain of (upstream, model) the door tries in order.

Kept per agent in data/policy/<folder>/model.json (outside what any sandbox mounts):
    {"model": "claude-sonnet-4-5", "upstream": "anthropic",
     "fallbacks": [{"upstream": "openrouter", "model": "anthropic/claude-sonnet-4.5"},
                   {"upstream": "ollama", "model": "llama3.1:8b"}], "effort": "high"}
An agent without the file keeps the defaults: any model, upstream `anthropic`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from agent_runner.config import EFFORTS, MODEL_VARIABLES  # one list for host and runner (pyproject.toml)

from ..proposal_rules import RuleError
from .registry import DEFAULT, Upstream

FILE = "model.json"
MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$")
MAX_FALLBACKS = 5


@dataclass(frozen=True)
class Link:
    upstream: str
    model: str

    def describe(self) -> str:
        return f"{self.upstream}:{self.model}"


@dataclass(frozen=True)
class AgentModel:
    model: str
    upstream: str = DEFAULT
    fallbacks: tuple[Link, ...] = field(default_factory=tuple)
    effort: str | None = None

    @property
    def chain(self) -> tuple[Link, ...]:
        return (Link(self.upstream, self.model), *self.fallbacks)

    def models(self) -> list[str]:
        seen: list[str] = []
        for link in self.chain:
            if link.model not in seen:
                seen.append(link.model)
        return seen

    def as_dict(self) -> dict:
        out = {"model": self.model, "upstream": self.upstream,
               "fallbacks": [{"upstream": f.upstream, "model": f.model} for f in self.fallbacks]}
        if self.effort:
            out["effort"] = self.effort
        return out

    def describe(self) -> list[str]:
        return [f"{i}. {link.describe()}" for i, link in enumerate(self.chain, 1)] + \
            ([f"effort {self.effort}"] if self.effort else [])


def check_model(raw: str) -> str:
    model = (raw or "").strip()
    if not MODEL_RE.match(model):
        raise RuleError(f"{raw!r} is not a model id (letters, digits and . _ : / @ + -, e.g. claude-sonnet-4-5 or "
                        "llama3.1:8b)")
    return model


def parse_fallback(raw: str, primary_upstream: str, known: set[str]) -> Link:
    """`[UPSTREAM:]MODEL` (pure): the part before the first ':' is an upstream only when it names a
    registered one; otherwise the whole string is a model on the agent's own upstream (Ollama's
    `llama3.1:8b`)."""
    head, sep, rest = (raw or "").strip().partition(":")
    if sep and head in known and rest:
        return Link(head, check_model(rest))
    return Link(primary_upstream, check_model(raw))


def _known(upstream: str, upstreams: dict[str, Upstream]) -> str:
    known = set(upstreams) | {DEFAULT}
    if upstream not in known:
        raise RuleError(f"no model upstream named {upstream!r}; registered: {', '.join(sorted(known))} "
                        "(flask --app app nanoclaw upstream add …)")
    return upstream


def _effort(effort) -> str | None:
    if effort is not None and effort not in EFFORTS:
        raise RuleError(f"effort must be one of {', '.join(EFFORTS)}")
    return effort


def build(model: str, upstream: str | None, fallbacks: list[str], effort: str | None,
          upstreams: dict[str, Upstream]) -> AgentModel:
    """The agent's choice from what a person typed, checked against the registered upstreams (pure)."""
    upstream = _known(upstream or DEFAULT, upstreams)
    if len(fallbacks) > MAX_FALLBACKS:
        raise RuleError(f"at most {MAX_FALLBACKS} fallbacks")
    chain = tuple(parse_fallback(f, upstream, set(upstreams) | {DEFAULT}) for f in fallbacks)
    return AgentModel(check_model(model), upstream, chain, _effort(effort))


def parse(data, upstreams: dict[str, Upstream]) -> AgentModel:
    """The file's form, checked again (an upstream removed since makes it invalid: the door then
    refuses the agent's calls rather than send them somewhere nobody chose)."""
    if not isinstance(data, dict) or not isinstance(data.get("fallbacks") or [], list):
        raise RuleError("model.json must hold an object with a list of fallbacks")
    links = []
    for raw in data.get("fallbacks") or []:
        if not isinstance(raw, dict):
            raise RuleError("a fallback must be {upstream, model}")
        links.append(Link(_known(str(raw.get("upstream") or DEFAULT), upstreams), check_model(str(raw.get("model") or ""))))
    if len(links) > MAX_FALLBACKS:
        raise RuleError(f"at most {MAX_FALLBACKS} fallbacks")
    return AgentModel(check_model(str(data.get("model") or "")), _known(str(data.get("upstream") or DEFAULT), upstreams),
                      tuple(links), _effort(data.get("effort")))


def path_of(policy_dir: Path, folder: str) -> Path:
    return Path(policy_dir) / folder / FILE


def read(policy_dir: Path, folder: str, upstreams: dict[str, Upstream]) -> AgentModel | None:
    """The agent's choice, None without one; RuleError for a file that is not valid."""
    path = path_of(policy_dir, folder)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw or "{}")
    except ValueError as exc:
        raise RuleError(f"{path} is not valid JSON: {exc}") from None
    return parse(data, upstreams)


def sandbox_env(choice: AgentModel | None) -> dict[str, str]:
    """What the sandbox's CLI is told of the agent's model (no secret: names only): every call it makes,
    the background helpers' and subagents' too, names the agent's model."""
    if choice is None:
        return {}
    env = {name: choice.model for name in MODEL_VARIABLES}
    if choice.effort:
        env["NANOCLAW_EFFORT"] = choice.effort
    return env
