"""The owner's model upstreams and each agent's model, changed from the CLI or the page.

Registering or removing an upstream is the owner's (it names a host secret); an agent's model and
fallbacks may be set by the owner or an admin of that agent, on registered upstreams only. Every
change is audited (names, never a secret's value), written atomically where the proxy reads it (it
applies from the next request) and restarts the agent's running sandboxes on the same conversation,
so the CLI in them is told the new model.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..inbound import lookups
from ..models import AgentGroup, audit
from ..proposal_rules import RuleError
from ..proxy import model_features
from ..proxy.model_body import FEATURES  # noqa: F401  (the page lists them from here: web sits above operator)
from ..proxy.policy_files import policy_root, write_json
from ..upstreams import chains, registry
from ..upstreams.chains import AgentModel
from ..upstreams.registry import Upstream
from ..security import write_atomic
from .restart import runtime_for, stop_group


class ModelRefused(ValueError):
    """Not allowed or not valid; the message says why."""


def _rule(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except RuleError as exc:
        raise ModelRefused(str(exc)) from None


def _owner(actor: str, what: str = "registers and removes model upstreams") -> None:
    if not (actor == "cli" or lookups.is_owner(actor)):
        raise ModelRefused(f"only the owner {what}")


def upstreams(settings) -> dict[str, Upstream]:
    return _rule(registry.read, policy_root(settings))


def add_upstream(settings, actor: str, name: str, url: str, auth: str, secret: str | None, prices: str,
                 why: str | None = None) -> Upstream:
    """prices: default, free, or the path of a price table (copied into the policy folder)."""
    _owner(actor)
    root = policy_root(settings)
    kind = prices if prices in ("default", "free") else "file"
    upstream = _rule(registry.check, {"name": name, "url": url, "auth": auth, "secret": secret, "prices": kind})
    if kind == "file":
        table = _rule(registry.load_price_file, Path(prices))
        (root / registry.PRICES_DIR).mkdir(parents=True, exist_ok=True)
        body = (json.dumps(table, indent=2, sort_keys=True) + "\n").encode()
        write_atomic(root / registry.PRICES_DIR / f"{upstream.name}.json", lambda fh: fh.write(body))
    found = upstreams(settings)
    before = found.get(upstream.name)
    found[upstream.name] = upstream
    write_json(registry.path_of(root), {"upstreams": [u.as_dict() for u in found.values()]})
    audit(actor, "upstream.add", upstream.name, before=before.describe() if before else None,
          after=upstream.describe(), **({"why": why} if why else {}))
    return upstream


def users_of(settings, name: str) -> list[str]:
    """The agents whose chain names this upstream."""
    root, found = policy_root(settings), upstreams(settings)
    using = []
    for agent in AgentGroup.select().order_by(AgentGroup.folder):
        try:
            choice = chains.read(root, agent.folder, found)
        except RuleError:
            continue
        if choice is not None and any(link.upstream == name for link in choice.chain):
            using.append(agent.folder)
    return using


def remove_upstream(settings, actor: str, name: str, why: str | None = None) -> Upstream:
    _owner(actor)
    found = upstreams(settings)
    if name not in found:
        raise ModelRefused(f"no model upstream {name!r} (registered: {', '.join(sorted(found)) or 'none'})")
    using = users_of(settings, name)
    if using:
        raise ModelRefused(f"agent(s) {', '.join(using)} use {name}: change their models first "
                           "(flask --app app nanoclaw model set …)")
    gone = found.pop(name)
    root = policy_root(settings)
    write_json(registry.path_of(root), {"upstreams": [u.as_dict() for u in found.values()]})
    (root / registry.PRICES_DIR / f"{name}.json").unlink(missing_ok=True)
    audit(actor, "upstream.remove", name, before=gone.describe(), **({"why": why} if why else {}))
    return gone


def current(settings, agent: AgentGroup) -> AgentModel | None:
    return _rule(chains.read, policy_root(settings), agent.folder, upstreams(settings))


def _may_set(actor: str, agent: AgentGroup) -> None:
    if not (actor == "cli" or lookups.is_owner_or_admin(actor, agent.id)):
        raise ModelRefused("you administer other agents, not this one")


# --- which upstreams an admin may put an agent on (trust round five, item 8) ---------------------

GRANTS_FILE = "upstream_grants.json"


def granted(settings, agent: AgentGroup) -> set[str]:
    """The upstreams an admin may put this agent on: the owner's grants; without any (every install before
    grants existed), every upstream not priced free, so nothing that worked breaks."""
    path = policy_root(settings) / agent.folder / GRANTS_FILE
    found = upstreams(settings)
    try:
        listed = json.loads(path.read_text(encoding="utf-8")).get("granted")
    except (OSError, ValueError, AttributeError):
        listed = None
    if isinstance(listed, list):
        return {name for name in listed if name in found or name == registry.DEFAULT}
    return {registry.DEFAULT} | {name for name, upstream in found.items() if not upstream.free}


def grant(settings, actor: str, agent: AgentGroup, name: str, allow: bool, why: str | None = None) -> set[str]:
    """The owner grants or revokes one upstream for one agent; the grants after."""
    _owner(actor, "grants and revokes upstreams")
    found = upstreams(settings)
    if name not in found and name != registry.DEFAULT:
        raise ModelRefused(f"no model upstream {name!r} (registered: {', '.join(sorted(found)) or 'none'})")
    before = granted(settings, agent)
    after = before | {name} if allow else before - {name}
    write_json(policy_root(settings) / agent.folder / GRANTS_FILE, {"granted": sorted(after)})
    audit(actor, "upstream.grant" if allow else "upstream.revoke", agent.folder, upstream=name,
          **({"why": why} if why else {}))
    return after


def features(settings, agent: AgentGroup) -> frozenset[str]:
    """What the owner allowed this agent's model requests to ask the provider to do (issue 60, item 4)."""
    return model_features.FeatureBook(policy_root(settings)).allowed(agent.folder)


def set_feature(settings, actor: str, agent: AgentGroup, feature: str, allow: bool, why: str | None = None) -> list[str]:
    """The owner allows or denies one provider feature for one agent: each is fetched or run outside the
    agent's egress allowlist and its budget's estimate, so an agent's admins may not."""
    _owner(actor, "allows provider features")
    try:
        return model_features.change(policy_root(settings), agent.folder, feature, allow, actor, why)
    except ValueError as exc:
        raise ModelRefused(str(exc)) from None


def _may_use(settings, actor: str, agent: AgentGroup, choice: AgentModel) -> None:
    """An admin (not the owner) may put an agent only on upstreams the owner granted it."""
    if actor == "cli" or lookups.is_owner(actor):
        return
    allowed = granted(settings, agent)
    for link in choice.chain:
        if link.upstream not in allowed:
            raise ModelRefused(f"upstream {link.upstream!r} is not granted to {agent.folder}; the owner grants it "
                               f"with: flask --app app nanoclaw upstream grant {agent.folder} {link.upstream}")


def set_model(settings, actor: str, agent: AgentGroup, model: str, upstream: str | None = None,
              fallbacks: list[str] = (), effort: str | None = None, why: str | None = None, *, wake=None) -> AgentModel:
    _may_set(actor, agent)
    choice = _rule(chains.build, model, upstream, list(fallbacks), effort, upstreams(settings))
    _may_use(settings, actor, agent, choice)
    before = current(settings, agent)
    write_json(chains.path_of(policy_root(settings), agent.folder), choice.as_dict())
    audit(actor, "model.set", agent.folder, before=before.describe() if before else None, after=choice.describe(),
          **({"why": why} if why else {}))
    _restart(settings, agent, wake)
    return choice


def clear_model(settings, actor: str, agent: AgentGroup, why: str | None = None, *, wake=None) -> bool:
    _may_set(actor, agent)
    path = chains.path_of(policy_root(settings), agent.folder)
    if not path.exists():
        return False
    before = current(settings, agent)
    path.unlink()
    audit(actor, "model.clear", agent.folder, before=before.describe() if before else None,
          **({"why": why} if why else {}))
    _restart(settings, agent, wake)
    return True


def _restart(settings, agent: AgentGroup, wake) -> None:
    """Running sandboxes stop; the next message starts one that is told the new model (the
    conversation goes on from its transcript)."""
    try:
        stop_group(settings, agent, runtime_for(settings, getattr(wake, "manager", None)))
    except Exception:  # noqa: BLE001 - no runtime here: the next start has the change anyway
        pass
