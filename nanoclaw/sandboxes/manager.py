"""Wake: turn a session that has due work into a running sandbox.

Builds the SandboxSpec (what the agent may see) from the settings, the agent
group and the session, and starts it through the selected Runtime. Starting is
idempotent per session; at most MAX_CONCURRENT_CONTAINERS run at once and
further wakes wait in a queue that the background jobs drain: first come, first
served, except that within an agent group a due task goes before chat messages. A session
whose sandbox keeps failing to start is told once and retried less often (start_failures.py).
"""
from __future__ import annotations

import functools
import json
import logging
import re
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import peewee

from .. import proposal_rules
from ..proposal_rules import RuleError
from ..config import PROJECT_ROOT
from ..runtime.base import INBOUND_TARGET, SESSION_TARGET, Mount, SandboxSpec
from ..sessions import destinations, store
from ..upstreams import chains, registry
from ..usage.gate import SpendGate
from .runner_code import compile_runner
from .start_failures import StartFailures, heartbeat_of, notice, short_reason, wait_s
from ..db import database
from ..db import announce
from ..inbound import lookups
from ..models import AgentGroup, Session, Wiring
from ..mounts import MountRequest, protected_paths, validate_mounts

log = logging.getLogger("nanoclaw.sandboxes")

RUNNER_DIR = PROJECT_ROOT / "container" / "agent_runner"
SDK_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}
PROXY_WAIT_S = 10.0


def chat_options_of(agent_group_id: int, session_id: str) -> dict[str, str]:
    """What the session's wiring says for its chat, as the session's options: `progress` ('on' or
    'off': whether a long turn shows a status message) and `voice` (VOICE_MODES: whether answers are
    also voice notes) and `stream` ('on' or 'off': whether the answer shows as it is written). A session with no chat, such as a task's isolated run, shows and says none."""
    session = Session.get_or_none(Session.id == session_id)
    wiring = session and session.messaging_group_id and Wiring.get_or_none(
        Wiring.agent_group == agent_group_id, Wiring.messaging_group == session.messaging_group_id)
    return {"progress": "on" if wiring and wiring.progress else "off", "voice": wiring.voice if wiring else "never",
            "stream": "on" if wiring and wiring.stream else "off", "while_busy": wiring.while_busy if wiring else "queue"}


def sandbox_name(install_id: str, folder: str, session_id: str) -> str:
    raw = f"nanoclaw-{install_id}-{folder}-{session_id}".lower()
    return re.sub(r"[^a-z0-9_.-]", "-", raw)


def build_spec(settings, folder: str, session_id: str, *, extra_mounts: tuple[Mount, ...] = (),
               command: tuple[str, ...] | None = None, image: str | None = None,
               mcp_servers: dict | None = None, withheld_tools: tuple[str, ...] = (),
               skills_dir: Path | None = None) -> SandboxSpec:
    """image / mcp_servers: what the owner approved for this agent group (agent_capabilities);
    withheld_tools: tools of ours the agent is not offered (withheld_tools())."""
    session_dir = store.session_path(settings.sessions_dir, folder, session_id)
    store.upgrade_layout(session_dir)
    global_dir = settings.groups_dir / "global"
    env = {
        **SDK_ENV,
        "NANOCLAW_SESSION_DIR": SESSION_TARGET,
        "NANOCLAW_INBOUND_DIR": INBOUND_TARGET,
        "NANOCLAW_GROUP_DIR": "/workspace/group",
        "NANOCLAW_PROXY_SOCKET": "/run/nanoclaw-proxy/proxy.sock",
        "NANOCLAW_MAX_MESSAGES_PER_PROMPT": str(settings.max_messages_per_prompt),
        "NANOCLAW_ASSISTANT_NAME": settings.assistant_name,
        "NANOCLAW_KEEP_MESSAGES_DAYS": str(settings.keep_messages_days),
        "NANOCLAW_FREEZE_IDLE_S": str(settings.freeze_idle_s),
        "NANOCLAW_SESSION_ID": session_id,
        "NANOCLAW_PROGRESS_EDIT_S": str(settings.progress_edit_s),  # a remote runner pushes its stream no faster
        # names, never values: the runner refuses to propose these as secrets (the host checks again)
        "NANOCLAW_RESERVED_SECRET_PREFIXES": ",".join(proposal_rules.reserved()),
        "TZ": settings.timezone,
    }
    env.update(model_env(settings, folder))  # the agent's model, when the owner chose one (names only)
    if withheld_tools:
        env["NANOCLAW_TOOLS_WITHHELD"] = ",".join(sorted(withheld_tools))
    if settings.max_turn_minutes:  # no cap unless the operator wants one (stuck turns are the sweep's)
        env["NANOCLAW_TURN_TIMEOUT_S"] = str(settings.max_turn_minutes * 60)
    kwargs = dict(
        name=sandbox_name(settings.install_id, folder, session_id),
        session_dir=store.agent_part(session_dir),
        inbound_dir=store.host_part(session_dir),
        group_dir=settings.groups_dir / folder,
        global_dir=global_dir if global_dir.is_dir() else None,
        runner_dir=RUNNER_DIR,
        proxy_dir=settings.proxy_dir / folder,
        extra_mounts=extra_mounts,
        packages_dir=packages if (packages := package_prefix(settings, folder)).is_dir() else None,
        skills_dir=skills_dir,
        env=env,
        labels={"nanoclaw.install": settings.install_id, "nanoclaw.folder": folder,
                "nanoclaw.session": session_id},
    )
    if command:
        kwargs["command"] = command
    if image:
        kwargs["image"] = image
    if mcp_servers:
        env["NANOCLAW_MCP_SERVERS"] = json.dumps(mcp_servers, sort_keys=True)
    return SandboxSpec(**kwargs)


def model_env(settings, folder: str) -> dict[str, str]:
    """The CLI's model variables for the agent's chosen model ({} without one, or with a file the
    proxy would not take either: the door then refuses what does not fit, and says why)."""
    policy = settings.data_dir / "policy"
    try:
        return chains.sandbox_env(chains.read(policy, folder, registry.read(policy)))
    except RuleError as exc:
        log.error("the model choice of %s is invalid (%s); its sandbox starts without one", folder, exc)
        return {}


def has_free_model(settings, folder: str) -> bool:
    """Whether the agent's chain has a model on a free upstream (the door uses it when the budget is
    spent, so a sandbox may start)."""
    policy = settings.data_dir / "policy"
    try:
        upstreams = registry.read(policy)
        choice = chains.read(policy, folder, upstreams)
    except RuleError:
        return False
    return choice is not None and any(upstreams[link.upstream].free for link in choice.chain
                                      if link.upstream in upstreams)


def package_prefix(settings, folder: str) -> Path:
    """Where the host installs an agent's approved pip and npm packages (python/, npm/)."""
    return settings.data_dir / "packages" / folder


def agent_capabilities(folder: str) -> dict:
    """The group's approved image and MCP servers from its container_config ({} when none)."""
    try:
        with (database.connection_context() if database.is_closed() else nullcontext()):
            agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    except Exception as exc:  # no database here (a bare test): the defaults
        log.debug("no capabilities for %s: %s", folder, exc)
        return {}
    config = (agent.container_config or {}) if agent else {}
    return {k: config[k] for k in ("image", "mcp_servers") if config.get(k)}


# Capabilities that decide which of their tools an agent is not offered: fn(folder, settings) -> tool names
# (the reading tools: reading/withheld.py). The host checks again when a tool's op arrives.
_WITHHOLDERS: list = []


def register_withholder(fn) -> None:
    key = (fn.__module__, fn.__qualname__)
    _WITHHOLDERS[:] = [f for f in _WITHHOLDERS if (f.__module__, f.__qualname__) != key] + [fn]


def withheld_tools(session_id: str, folder: str | None = None, settings=None) -> tuple[str, ...]:
    """Tools not offered to this session's agent: create_agent unless it is an admin's agent (the
    host checks again when a proposal arrives and when it is applied: roles change meanwhile), and
    what each capability withholds. When the database cannot say, the tools are withheld."""
    withheld = {"create_agent"}
    try:
        with (database.connection_context() if database.is_closed() else nullcontext()):
            session = Session.get_or_none(Session.id == session_id)
            if session is not None and lookups.is_admin_agent(session):
                withheld.discard("create_agent")
            for fn in _WITHHOLDERS if folder else ():
                withheld |= set(fn(folder, settings))
    except (peewee.DatabaseError, sqlite3.Error) as exc:
        log.warning("could not tell which tools session %s's agent is offered: %s", session_id, exc)
        withheld.add("create_agent")
    return tuple(sorted(withheld))


@dataclass
class QueuedWake:
    folder: str
    session_id: str
    task: bool = False  # the session has a due scheduled task


def pick_next(queue: list[QueuedWake]) -> int:
    """Index of the wake to start next: the oldest, unless its agent group also waits with a
    due task, which then goes first (within a group, tasks before chat messages)."""
    head = queue[0]
    if not head.task:
        for i, q in enumerate(queue):
            if q.task and q.folder == head.folder:
                return i
    return 0


@functools.cache
def _compile_runner_once() -> bool:
    return compile_runner(RUNNER_DIR)


class SandboxManager:
    """One per process that wakes sessions (the web program, or a `chat` command)."""

    def __init__(self, settings, runtime, *, mounts_for=None, on_refused=None, capabilities_for=None,
                 skills_for=None):
        self.settings = settings
        self.on_refused = on_refused  # tell the chat (once per streak) why its sandbox does not start
        self.runtime = runtime
        self.mounts_for = mounts_for or (lambda folder: ())
        self.capabilities_for = capabilities_for or agent_capabilities
        # (folder, sandbox name) -> this start's approved skills, checked (operator/skill_offer), or None
        self.skills_for = skills_for or (lambda folder, name: None)
        self._lock = threading.Lock()
        self._starting: set[str] = set()
        self.queue: list[QueuedWake] = []
        self.over: dict[str, int] = {}  # session id -> how many sandboxes past capacity its start may go
        self.on_queued: Callable[[], None] = lambda: None  # the background jobs drain only while it has any
        self.held = False     # start-up: wakes queue until orphans are gone and the first sweep ran
        self.closing = False  # shutdown: no new sandboxes
        self.last_error: str | None = None
        self.failures = StartFailures()
        self.budget = SpendGate(settings)
        _compile_runner_once()

    def name_of(self, folder: str, session_id: str) -> str:
        return sandbox_name(self.settings.install_id, folder, session_id)

    def running(self) -> list[str]:
        return self.runtime.list_sandboxes(self.settings.install_id)

    def is_running(self, folder: str, session_id: str) -> bool:
        return self.runtime.is_running(sandbox_name(self.settings.install_id, folder, session_id))

    def _at_capacity(self, over: int = 0) -> bool:
        return len(self.running()) + len(self._starting) >= self.settings.max_concurrent_containers + over

    def would_queue(self, folder: str, session_id: str, over: int = 0) -> bool:
        """Whether a wake of this session would wait in the queue now (not running, no room even `over` past)."""
        with self._lock:
            return not self.is_running(folder, session_id) and (self.held or self._at_capacity(over))

    def _enqueue(self, folder: str, session_id: str, task: bool) -> None:
        for q in self.queue:
            if (q.folder, q.session_id) == (folder, session_id):
                q.task = q.task or task
                return
        self.queue.append(QueuedWake(folder, session_id, task))
        self.on_queued()

    def wake(self, folder: str, session_id: str, *, task: bool = False) -> bool:
        """Make sure the session's sandbox runs. False if it had to queue (capacity) or failed."""
        name = sandbox_name(self.settings.install_id, folder, session_id)
        if not self._may_start(folder, session_id, name):
            return False
        with self._lock:
            if self.closing:
                return False
            if name in self._starting:
                return True
            # held: a running sandbox is a previous run's, about to be removed; the wake must wait
            # for it, not count it (else the message waited for the next sweep, 10 s)
            if not self.held and self.runtime.is_running(name):
                return True
            # an agent waiting on this one's answer holds a sandbox: it may start past capacity (delegation)
            if self.held or self._at_capacity(self.over.get(session_id, 0)):
                self._enqueue(folder, session_id, task)
                if not self.held:
                    log.info("wake of %s/%s queued: %d sandboxes already run", folder, session_id,
                             self.settings.max_concurrent_containers)
                return False
            self._starting.add(name)
        return self._start(folder, session_id, name)

    def drain(self) -> int:
        """Start queued wakes while there is room; returns how many started."""
        started = 0
        while True:
            with self._lock:
                if self.closing or self.held or not self.queue or self._at_capacity():
                    return started
                entry = self.queue.pop(pick_next(self.queue))
                name = sandbox_name(self.settings.install_id, entry.folder, entry.session_id)
                if name in self._starting or self.runtime.is_running(name):
                    continue
            if not self._may_start(entry.folder, entry.session_id, name):
                continue  # backing off; the sweep wakes it again
            with self._lock:
                if name in self._starting or self.closing or self.held:
                    continue
                if self._at_capacity():
                    self.queue.insert(0, entry)
                    return started
                self._starting.add(name)
            if self._start(entry.folder, entry.session_id, name):
                started += 1

    def _may_start(self, folder: str, session_id: str, name: str) -> bool:
        """False while a session whose sandbox keeps failing to start waits out its backoff. Judges
        our last start first, if that sandbox is gone (crashed before its runner came up?)."""
        if name in self._starting or self.runtime.is_running(name):
            return True
        if self.budget.spent_up(folder) and not has_free_model(self.settings, folder):
            log.debug("not starting %s: its agent's budget is spent (the messages wait)", name)
            return False
        now = time.time()
        path = store.session_path(self.settings.sessions_dir, folder, session_id)
        state, new_failure = self.failures.judge(name, heartbeat_of(path), lambda: self.runtime.logs(name), now)
        if state is None:
            return True
        if new_failure:
            log.warning("sandbox %s stopped before its runner came up (failed start %d in a row): %s", name,
                        state.failures, state.reason)
            self._tell(folder, session_id, name)
        wait = wait_s(state.failures, state.last_failure_at, now)
        if wait > 0:
            log.debug("not starting %s for %.0f s more: it failed to start %d times in a row", name, wait,
                      state.failures)
            return False
        return True

    def _tell(self, folder: str, session_id: str, name: str) -> None:
        """Once per streak of failed starts: a log line and a word in the session's chat."""
        if not self.failures.take_notice(name):
            return
        state = self.failures.state(name)
        log.error("the sandbox of %s/%s failed to start %d times in a row (%s); telling its chat and retrying "
                  "less often", folder, session_id, state.failures, state.reason)
        if self.on_refused is not None:
            try:
                self.on_refused(folder, session_id, notice(state.reason))
            except Exception as exc:  # the chat is unreachable: the log line above stays
                log.error("could not tell %s/%s that its sandbox does not start: %s", folder, session_id, exc)

    def _start(self, folder: str, session_id: str, name: str) -> bool:
        try:
            self._wait_for_proxy(folder)
            self._sync_destinations(folder, session_id)
            spec = build_spec(self.settings, folder, session_id, extra_mounts=tuple(self.mounts_for(folder)),
                              withheld_tools=withheld_tools(session_id, folder, self.settings),
                              skills_dir=self.skills_for(folder, name), **self.capabilities_for(folder))
            started = time.monotonic()
            self.failures.started(name, time.time())
            self.runtime.start(spec)
            log.info("started sandbox %s (%s) in %.2fs", name, self.runtime.name, time.monotonic() - started)
            return True
        except Exception as exc:
            self.last_error = f"could not start the sandbox for {folder}: {exc}"
            state = self.failures.failed(name, short_reason(str(exc)), time.time())
            log.error("%s (failed start %d in a row)", self.last_error, state.failures)
            self._tell(folder, session_id, name)
            return False
        finally:
            with self._lock:
                self._starting.discard(name)

    def _sync_destinations(self, folder: str, session_id: str) -> None:
        """The agent's destinations as they are now, into the session's inbound.db (the runner reads
        them there; delivery checks against them)."""
        try:
            with (database.connection_context() if database.is_closed() else nullcontext()):
                group = AgentGroup.get_or_none(AgentGroup.folder == folder)
                if group is not None:
                    path = store.session_path(self.settings.sessions_dir, folder, session_id)
                    destinations.sync(path, group.id)
                    for key, value in chat_options_of(group.id, session_id).items():
                        store.set_option(path, key, value)
        except (peewee.DatabaseError, sqlite3.Error, OSError) as exc:  # never what keeps a sandbox from starting
            log.warning("could not refresh the destinations of %s/%s (the previous list stays): %s", folder,
                        session_id, exc)

    def stop(self, folder: str, session_id: str) -> None:
        name = sandbox_name(self.settings.install_id, folder, session_id)
        self.failures.stopped(name, heartbeat_of(store.session_path(self.settings.sessions_dir, folder, session_id)))
        self.runtime.stop(name)

    def stop_all(self, timeout: float = 5) -> list[str]:
        """Stop every sandbox of this install (start-up: a previous run's orphans; shutdown: ours).
        A stopped runner gives its in-flight rows back, so the next start carries on."""
        names = self.running()
        if names:
            with ThreadPoolExecutor(max_workers=min(8, len(names)), thread_name_prefix="nanoclaw-stop") as pool:
                list(pool.map(lambda n: self._stop_quietly(n, timeout), names))
        return names

    def _stop_quietly(self, name: str, timeout: float) -> None:
        try:
            self.runtime.stop(name, timeout=timeout)
        except Exception as exc:  # one stuck sandbox must not keep the others running
            log.error("could not stop sandbox %s: %s", name, exc)

    def _wait_for_proxy(self, folder: str) -> None:
        sock = self.settings.proxy_dir / folder / "proxy.sock"
        deadline = time.monotonic() + PROXY_WAIT_S
        if not sock.exists():
            announce(self.settings.data_dir, "proxy")  # a group the proxy has not opened yet: look now
        while not sock.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no proxy socket at {sock}: is the `proxy` program running? "
                                   "(supervisord starts it; by hand: flask --app app nanoclaw proxy)")
            time.sleep(0.05)


def mounts_for(settings):
    """folder -> the agent's extra mounts, validated against the allowlist as it is right now.

    Raises MountRefused: a refused mount keeps the sandbox from starting."""

    def resolve(folder: str) -> tuple[Mount, ...]:
        with database.connection_context():
            agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
        declared = (agent.container_config or {}).get("mounts", []) if agent else []
        requests = [MountRequest(m["host_path"], m["name"], bool(m.get("readwrite"))) for m in declared]
        approved = validate_mounts(requests, settings.mount_allowlist, protected_paths(settings)) if requests else []
        return tuple(Mount(host=a.host_path, target=a.name, readonly=a.readonly) for a in approved)
    return resolve
