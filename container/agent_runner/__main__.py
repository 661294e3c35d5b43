"""`python -m agent_runner` (PYTHONPATH=/opt/nanoclaw): the agent side of one session's sandbox.

Start-up order is chosen for cold-start latency: the bridge and the session store come up first,
then the SDK import (without what left_out.py names) and the CLI connect; the first poll follows immediately.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
import sqlite3
import sys
import time

from . import left_out

left_out.install()  # first: what the SDK's imports would load and a runner never runs stays out

from .bridge import Bridge  # noqa: E402
from .config import PLACEHOLDER_API_KEY, RunnerConfig  # noqa: E402
from .store import SessionStore  # noqa: E402

log = logging.getLogger("agent_runner")

# Never let a credential the sandbox should not have reach the CLI (it is passed our environment).
_CREDENTIAL_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")


def _setup_logging() -> None:
    logging.basicConfig(stream=sys.stderr, level=os.environ.get("NANOCLAW_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def _amain(config: RunnerConfig, base_url: str, started: float) -> int:
    from .mcp_tools import ToolContext  # noqa: E402 - after the cheap parts are up
    from .poll_loop import EVENT_HEARTBEAT_S, PollLoop
    from .provider import ClaudeProvider
    imported = time.monotonic()

    store = SessionStore(config.session_dir, config.inbound_dir)
    dropped = store.forget_stale_claims()
    if dropped:
        log.info("forgot %d stale processing claim(s) of a previous runner", dropped)
    try:
        replies, outcomes = store.prune(config.keep_messages_days)
        if replies or outcomes:
            log.info("pruned %d delivered repl(ies) and %d outcome(s) older than %g days", replies, outcomes,
                     config.keep_messages_days)
    except sqlite3.Error as e:  # never what keeps the agent from answering
        log.warning("could not prune old rows: %s", e)
    store.set_tool(None)
    store.touch_heartbeat()
    ctx = ToolContext(store=store, config=config)
    provider = ClaudeProvider(config, store, ctx, base_url,
                              on_event=lambda: store.touch_heartbeat(EVENT_HEARTBEAT_S))
    loop = PollLoop(config, store, provider, ctx)
    stop = asyncio.Event()
    main_task = asyncio.current_task()

    def on_signal() -> None:
        log.info("stop requested")
        if stop.is_set() or loop.in_flight:
            main_task.cancel()  # mid-turn: do not wait for the model; the rows are released
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, on_signal)
    try:
        try:
            await provider.connect()
        except Exception as e:  # noqa: BLE001 - the first turn tries again and tells the user
            log.error("sdk connect failed at start: %s", type(e).__name__)
        now = time.monotonic()
        # where a cold start goes, in every sandbox's log: our imports, then the CLI's start and handshake
        log.info("ready in %.0f ms (imports %.0f ms, store and CLI connect %.0f ms; %.0f ms of CPU here)", (now - started) * 1000,
                 (imported - started) * 1000, (now - imported) * 1000, time.process_time() * 1000)
        await loop.run(stop)
    except asyncio.CancelledError:
        pass
    finally:
        await provider.close()
        store.close()
    log.info("stopped")
    return 0


def use_packages(env, root) -> None:
    """The owner-approved pip and npm packages (installed by the host into a prefix mounted here
    read-only) for everything the agent runs: its shell, scripts and MCP servers."""
    if not root.is_dir():
        return
    env["PATH"] = f"{root}/npm/node_modules/.bin:{root}/python/bin:" + env.get("PATH", "/usr/bin:/bin")
    env["PYTHONPATH"] = ":".join(p for p in (f"{root}/python", env.get("PYTHONPATH")) if p)
    env["NODE_PATH"] = ":".join(p for p in (f"{root}/npm/node_modules", env.get("NODE_PATH")) if p)


def main() -> int:
    started = time.monotonic()
    _setup_logging()
    config = RunnerConfig.from_env()
    for var in _CREDENTIAL_VARS:
        os.environ.pop(var, None)
    bridge = remote = None
    if os.environ.get("NANOCLAW_DOOR_URL"):  # a sandbox on another machine: the session over the network
        from .door_link import DoorBridge, DoorLink
        from .remote import RemoteSession
        link = DoorLink.from_env(os.environ)
        config = dataclasses.replace(config, proxy_socket=None)  # no socket here: model calls go via the door
        packages = config.workspace_dir / "packages"  # a folder of its own when the agent has approved packages
        remote = RemoteSession(link, config.session_dir, config.inbound_dir, config.group_dir, config.global_dir,
                               packages if packages.is_dir() else None)
        remote.bootstrap()
        remote.start()
        SessionStore.follow_renames = True
        bridge = DoorBridge(link).start()
        base_url = bridge.url
    elif config.proxy_socket:
        bridge = Bridge(config.proxy_socket).start()
        base_url = bridge.url
    else:  # development outside a sandbox: talk to ANTHROPIC_BASE_URL directly
        base_url = os.environ.get("ANTHROPIC_BASE_URL") or "http://127.0.0.1:9"
        log.warning("NANOCLAW_PROXY_SOCKET unset; model calls go to %s", base_url)
    os.environ["ANTHROPIC_BASE_URL"] = base_url
    os.environ["ANTHROPIC_API_KEY"] = PLACEHOLDER_API_KEY
    if bridge:
        # Other HTTPS (WebFetch, pip, curl in Bash) goes out as CONNECT through the same door,
        # where the proxy applies the group's egress allowlist.
        # Plain http:// goes there too: the proxy serves credential routes by host and refuses the rest.
        for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
            os.environ[var] = base_url
        os.environ["NANOCLAW_PROXY_URL"] = base_url  # credential routes by path: $NANOCLAW_PROXY_URL/<prefix>/...
        for var in ("NO_PROXY", "no_proxy"):
            os.environ[var] = "127.0.0.1,localhost"
    use_packages(os.environ, config.workspace_dir / "packages")
    log.info("runner start: session=%s inbound=%s group=%s", config.session_dir, config.inbound_dir, config.group_dir)
    try:
        return asyncio.run(_amain(config, base_url, started))
    finally:
        if remote:
            remote.finish()
        if bridge:
            bridge.stop()


if __name__ == "__main__":
    sys.exit(main())
