"""The service's parts, built in one place.

`create_app` (app.py) calls `build`: one Wake for the process, handed to everything that writes a
session, and the capability modules imported (the one list that names them: they register their
router gates, card actions, system ops, housekeeping jobs and page items). The web program's worker
then calls `start_service` (gunicorn.conf.py): the intake thread, the sandbox runtime, and the
background jobs if this process wins the scheduler lock, which connect the Wake to their sandbox
manager. Nothing below web/ reaches for these parts through Flask: they are passed in.

The app object is only the holder of the parts here (`app.config["NANOCLAW"]`, `app.extensions`).
"""
from __future__ import annotations

import logging
import threading

from .approvals import agent_cards, chats, pairing, questions, senders, set_aside  # noqa: F401  (cards; approvals; pairing)
from .channels.base import get_adapter
from .inbound import intake
from .lifecycle.background import RUNTIME_RETRY_S, LOCK_RETRY_S, Background, take_lock
from .operator import budgets, expiry, help_requests, outages, proposals, waiting  # noqa: F401  (proposals; budget and outage cards)
from .operator.skill_offer import offer as skills_offered
from .hooks import intake as hook_intake  # noqa: F401  (its housekeeping job: deliveries forgotten after 7 days)
from .delegation import cards as ask_cards, channel as agent_channel, ops as delegation_ops  # noqa: F401  (ask_agent, its cards, the agent channel)
from .runtime.base import RuntimeUnavailable
from .runtime.select import image_to_build, select_runtime
from .runtime.switching import SwitchingRuntime
from .sandboxes import setup as runtime_setup
from .sandboxes.manager import SandboxManager, mounts_for
from .sessions import store
from .sessions.wake import Wake
from .tasks import ops  # noqa: F401  (the agent's scheduling tools)
from .memory import index, ops as memory_ops  # noqa: F401  (the memory tools, the history index, the snapshot)
from .reading import browser_ops  # (browser_*: a sandboxed Chromium per session, driven by the host)
from .reading import ops as reading_ops  # (web_read: the host reads a page for the agent)
from .reading.withheld import tools_withheld  # noqa: F401  (which of the reading tools an agent is not offered)

log = logging.getLogger("nanoclaw.service")


def build(app) -> Wake:
    """The process's Wake, kept with the app for the web layer (web/ reads it from there)."""
    wake = app.extensions.setdefault("nanoclaw.wake", Wake())
    return wake


def wake_of(app) -> Wake:
    return app.extensions["nanoclaw.wake"]


def start(app, manager=None, handle=None) -> Background | None:
    """Start the background jobs in this process if it wins the scheduler lock (or was handed it)."""
    settings = app.config["NANOCLAW"]
    handle = handle or take_lock(settings.data_dir / "scheduler.lock")
    if handle is None:
        log.info("another process holds %s; this one runs no background jobs while it does",
                 settings.data_dir / "scheduler.lock")
        return None
    bg = Background(settings=settings, manager=manager, lock_handle=handle)
    bg.start()
    app.extensions["nanoclaw.background"] = bg
    if manager is not None:
        wake_of(app).connect(bg.start_session, manager)
    delegation_ops.use_wake(wake_of(app))  # an ask wakes the asked agent, its answer the asker
    return bg


def wait_for_lock(app, begin) -> threading.Thread:
    """The lock is held elsewhere: try it every LOCK_RETRY_S and, once this process has it, run
    `begin(handle)`. The holder may be the worker of a web master that was killed, finishing its
    shutdown (stopping sandboxes takes seconds); the worker started in its place must take over
    when it lets go, not only when it is itself restarted. stop_waiting() ends the wait."""
    path = app.config["NANOCLAW"].data_dir / "scheduler.lock"
    stop = threading.Event()
    app.extensions["nanoclaw.lock_wait"] = stop

    def wait() -> None:
        while not stop.wait(LOCK_RETRY_S):
            handle = take_lock(path)
            if handle is None:
                continue
            if stop.is_set():
                handle.close()
                return
            log.info("took over %s: this process runs the background jobs from now on", path)
            try:
                begin(handle)
            except Exception:  # never silently: without the jobs nothing is delivered
                log.exception("could not start the background jobs after taking over the lock")
                handle.close()
            return

    thread = threading.Thread(target=wait, name="nanoclaw-lock-wait", daemon=True)
    thread.start()
    return thread


def stop_waiting(app) -> None:
    stop = app.extensions.pop("nanoclaw.lock_wait", None)
    if stop is not None:
        stop.set()


def start_intake(app) -> intake.IntakeThread:
    """Every web process routes what its own requests accepted, after acknowledging them."""
    thread = intake.IntakeThread(app.config["NANOCLAW"], wake_of(app)).start()
    app.extensions["nanoclaw.intake"] = thread
    return thread


def stop_intake(app) -> None:
    thread = app.extensions.pop("nanoclaw.intake", None)
    if thread is not None:
        thread.stop()


def start_service(app) -> Background | None:
    """The web program's start: the intake thread, the sandbox runtime, then the background jobs.

    Docker answering without the agent image: the image is built here in the background. Bubblewrap
    serves meanwhile when it works (new sandboxes move to Docker once the image is there); when it
    does not, the first messages wait for the build and their chats are told why."""
    start_intake(app)
    bg = start_jobs(app)
    if bg is None:
        wait_for_lock(app, lambda handle: start_jobs(app, handle))
    return bg


def start_jobs(app, handle=None) -> Background | None:
    """The sandbox runtime, then the background jobs if this process holds (or wins) the lock."""
    settings = app.config["NANOCLAW"]
    to_build = image_to_build(settings)

    def find(say=log) -> SandboxManager:
        runtime = select_runtime(settings, say)
        if to_build is not None:
            runtime = SwitchingRuntime(runtime)
        return SandboxManager(settings, runtime, mounts_for=mounts_for(settings), on_refused=tell_owner(settings),
                              skills_for=skills_offered(settings))
    try:
        bg = start(app, find(), handle)
    except RuntimeUnavailable as exc:
        log.error("no sandbox runtime: %s. Messages are stored and answered once one works (checked every %.0f s, "
                  "no restart needed)", exc, RUNTIME_RETRY_S)
        bg = start(app, None, handle)
        if bg is not None:
            bg.await_runtime(wake_of(app), lambda: find(lambda _line: None))
            if to_build is not None:
                wake_of(app).connect(runtime_setup.tell_once(settings, "(Setting up: your agent's sandbox is being "
                                                                       "built; the first answer takes a minute or two.)"))
    if bg is not None and to_build is not None:
        threading.Thread(target=runtime_setup.build_in_background, args=(bg.manager, settings, to_build),
                         name="nanoclaw-image-build", daemon=True).start()
    return bg


def tell_owner(settings):
    """When a sandbox cannot start (e.g. a refused mount), say why in the session's chat."""

    def notify(folder: str, session_id: str, message: str) -> None:
        path = store.session_path(settings.sessions_dir, folder, session_id)
        try:
            target = store.routing_of(path)
            if target is not None:
                get_adapter(target.channel_type, settings).send_text(target, f"(Your agent could not start: {message})")
        except Exception as exc:
            log.error("could not tell %s/%s why its sandbox did not start: %s", folder, session_id, exc)
    return notify


def stop_service(app) -> None:
    """The worker's exit: wait no longer for the lock, route what was acknowledged, stop the jobs."""
    stop_waiting(app)  # a worker still waiting for the scheduler lock takes nothing over now
    stop_intake(app)  # route what this worker acknowledged before the sandboxes stop
    bg = app.extensions.get("nanoclaw.background")
    if bg is not None:
        bg.shutdown()
    reading_ops.stop()  # the reading worker goes with the program
    browser_ops.stop()  # and the browser worker, with every browser it runs
