"""The agent's `web_read` op: the host reads a page for it and answers in the envelope.

Delivery hands the op over and goes on (a read can take 30 s; a session's other rows and other
sessions' do not wait): the read runs on this module's few threads. What it may read is decided here
from the host's records (the agent's row, its egress allowlist), never from the op; each read is
recorded for the owner (never the body), at most READS_PER_MINUTE a session.
"""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..db import database
from ..internet.addresses import Refused, target
from ..internet.envelope import wrap
from ..internet.own import own_ports
from ..lifecycle.housekeeping import register_job
from ..models import AgentGroup
from ..outbound import delivery
from ..proxy.egress import matching_entry
from ..proxy.policy_files import PolicyStore, policy_root
from ..proxy.sockets import socket_path
from ..sessions import store
from ..usage import budgets, ledger
from . import settings as settings_module
from . import summary
from .access import Access, RateWindow, read_refusal, search_refusal
from .client import Worker, WorkerGone
from .tables import WebFetch

log = logging.getLogger("nanoclaw.reading")

PAGE_CHARS = 50_000
READS_PER_MINUTE = 30
READ_TIMEOUT_S = 45.0  # the fetch's own limits are 30 s; extraction of a large page adds a few
THREADS = 4

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_worker: Worker | None = None
_window = RateWindow(READS_PER_MINUTE, 60.0)
_policies: PolicyStore | None = None
_limits = budgets.LimitCache()


def _answer_id(request_id: str) -> str:
    return f"answer:{request_id}"


def _answer(session_path: Path, request_id: str, ok: bool, text: str, tool: str = "web_read") -> None:
    store.write_message(session_path, content={"ok": ok, "text": text if ok else f"Error: {text}", "tool": tool},
                        target=None, kind="answer", trigger=False, message_id=_answer_id(request_id), status="completed")


def _parts(settings):
    global _pool, _worker, _policies
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="web-read")
            _worker = Worker(settings.web_idle_s)
            _policies = PolicyStore(policy_root(settings))
        return _pool, _worker, _policies


def _hand_over(session_path: Path, row, settings, work, *args) -> None:
    """Run `work(session_path, request_id, *args, settings)` on the reading threads, once per request:
    delivery goes on at once (an op already answered, after a restart, is not run again)."""
    request_id = str(row.op.get("request_id") or row.id)[:64]
    if not store.message_exists(session_path, _answer_id(request_id)):
        pool, _, _ = _parts(settings)
        pool.submit(work, session_path, request_id, *args, settings)


def handle_read(session_path: Path, row, settings) -> None:
    _hand_over(session_path, row, settings, _read, str(row.op.get("url") or "")[:4000], row.op.get("offset"),
               str(row.op.get("question") or "")[:1000])


def _read(session_path: Path, request_id: str, url: str, offset, question: str, settings) -> None:
    folder, session_id = session_path.parent.name, session_path.name
    try:
        ok, text, status, size, outcome = _fetch(folder, session_id, url, offset, question, settings)
    except Exception as exc:  # noqa: BLE001 - the agent is told, the worker's trouble is logged once
        log.error("web_read for %s failed: %s", folder, type(exc).__name__)
        ok, text, status, size, outcome = False, "the page could not be read on the host; try again", None, 0, "failed"
    _record(folder, session_id, "web_read", url, status, size, outcome)
    _answer(session_path, request_id, ok, text)


def _record(folder: str, session_id: str, tool: str, url: str, status: int | None, size: int, outcome: str) -> None:
    """The owner's record of one read or search (never its body)."""
    try:
        with database.connection_context():
            WebFetch.create(agent_folder=folder, session_id=session_id, tool=tool, url=url[:2000], status=status,
                            bytes=size, outcome=outcome[:500])
    except Exception as exc:  # noqa: BLE001 - a full database must not keep the answer from the agent
        log.error("the fetch log could not be written: %s", type(exc).__name__)


def _access(folder: str, search_configured: bool = False) -> Access | None:
    """What the agent may reach, from the host's records; None for an agent the host does not know."""
    with database.connection_context():
        agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
        return None if agent is None else settings_module.current(agent, search_configured)


def _fetch(folder: str, session_id: str, url: str, offset, question: str, settings
           ) -> tuple[bool, str, int | None, int, str]:
    _, worker, policies = _parts(settings)
    access = _access(folder)
    if access is None:
        return False, "this agent is unknown to the host", None, 0, "unknown agent"
    try:
        where = target(url, allow_ports=frozenset(settings.web_allow_ports))
    except Refused as exc:
        return False, str(exc), None, 0, str(exc)
    why = read_refusal(access, where.host, where.port,
                       lambda host, port: matching_entry(policies.get(folder).egress, host, port) is not None)
    if why:
        return False, why, None, 0, why
    wait = _window.admit(session_id, time.monotonic())
    if wait is not None:
        why = f"at most {READS_PER_MINUTE} pages a minute; read again in {wait:.0f} s"
        return False, why, None, 0, "rate limited"
    start = max(0, int(offset)) if isinstance(offset, int) and not isinstance(offset, bool) else 0
    summarising = bool(settings.web_summary_model) and start == 0
    try:
        got = worker.ask({"url": url, "offset": start, "limit": summary.MAX_INPUT_CHARS if summarising else PAGE_CHARS,
                          "allow_networks": list(settings.web_allow_networks),
                          "allow_ports": list(settings.web_allow_ports), "own_ports": sorted(own_ports(settings))},
                         READ_TIMEOUT_S)
    except WorkerGone:
        return False, "the page could not be read on the host; try again", None, 0, "worker stopped"
    except TimeoutError:  # a read that would not end (a page built to make the parser loop): it goes with its worker
        log.warning("a read of %s took over %.0f s; the reading worker was stopped", folder, READ_TIMEOUT_S)
        worker.stop(kill=True)
        return False, "the page could not be read in time on the host", None, 0, "timed out"
    if not got.get("ok"):
        return False, str(got.get("reason")), None, 0, str(got.get("reason"))
    status, size = got.get("status"), int(got.get("bytes") or 0)
    if summarising and int(got.get("total") or 0) > settings.web_summary_chars:
        try:
            written = summary.summarise(socket_path(settings.proxy_dir, folder), session_id, settings.web_summary_model,
                                        question, str(got.get("text") or ""), str(got.get("url")))
        except summary.SummaryFailed as exc:
            why = f"the page is long and its summary could not be made: {exc}; read it with web_read and offset=1"
            return False, why, status, size, f"summary failed: {exc}"
        details = (f"title: {got.get('title') or '(none)'}; a summary by {settings.web_summary_model}, which read the "
                   f"page's {got.get('total')} characters with no tools and your question; the page's own text: "
                   "web_read with offset=1")
        return True, wrap(written, source=str(got.get("url")), kind="summary of a web page", details=details), \
            status, size, "read and summarised"
    got["text"] = str(got.get("text") or "")[:PAGE_CHARS]
    return True, render(got), status, size, "read"


def render(got: dict) -> str:
    """The worker's answer as the agent reads it: in the envelope, with where it is in the page."""
    text, start, total = str(got.get("text") or ""), int(got.get("offset") or 0), int(got.get("total") or 0)
    end = start + len(text)
    where = f"characters {start + 1 if total else 0}–{end} of {total}"
    if end < total:
        where += f"; call web_read again with offset={end} to read on"
    stopped = {"size": "; the page was cut at the 5 MB read limit",
               "time": "; the page did not finish within the 30 s limit, this is what arrived"}.get(got.get("stopped"), "")
    fetched = str(got.get("fetched_at") or "").replace("T", " ").removesuffix("+00:00")
    details = (f"title: {got.get('title') or '(none)'}; fetched {fetched} UTC, HTTP {got.get('status')}, "
               f"{got.get('content_type')}; {where}{stopped}")
    return wrap(text or "(the page has no readable text)", source=str(got.get("url")), kind="web page", details=details)


def handle_search(session_path: Path, row, settings) -> None:
    count = row.op.get("count")
    count = count if isinstance(count, int) and not isinstance(count, bool) else 10
    _hand_over(session_path, row, settings, _search, str(row.op.get("query") or "")[:400], max(1, min(count, 20)))


def _search(session_path: Path, request_id: str, query: str, count: int, settings) -> None:
    folder, session_id = session_path.parent.name, session_path.name
    try:
        ok, text, outcome = _searched(folder, session_id, query, count, settings)
    except Exception as exc:  # noqa: BLE001 - the agent is told, the trouble is logged once
        log.error("web_search for %s failed: %s", folder, type(exc).__name__)
        ok, text, outcome = False, "the search could not be made on the host; try again", "failed"
    _record(folder, session_id, "web_search", f"{settings.search}: {query}", None, 0, outcome)
    _answer(session_path, request_id, ok, text, "web_search")


def _searched(folder: str, session_id: str, query: str, count: int, settings) -> tuple[bool, str, str]:
    _, worker, _ = _parts(settings)
    configured = settings.search != "none"
    if not query.strip():
        return False, "say what to search for", "empty query"
    access = _access(folder, configured)
    if access is None:
        return False, "this agent is unknown to the host", "unknown agent"
    why = search_refusal(access, configured)
    if why:
        return False, why, why
    if settings.search_price and _over_budget(folder, settings):
        why = ("this search would take the agent over its budget (for today or this month); no search was made and "
               "nothing was charged")
        return False, why, "budget spent"
    wait = _window.admit(f"search:{session_id}", time.monotonic())
    if wait is not None:
        return False, f"at most {READS_PER_MINUTE} searches a minute; search again in {wait:.0f} s", "rate limited"
    try:
        got = worker.ask({"kind": "search", "provider": settings.search, "search_url": settings.search_url,
                          "query": query, "count": count}, READ_TIMEOUT_S)
    except (WorkerGone, TimeoutError):
        return False, "the search did not answer in time on the host; try again", "worker did not answer"
    if not got.get("ok"):
        return False, str(got.get("reason")), str(got.get("reason"))
    if settings.search_price:
        with database.connection_context():
            ledger.record_search(folder, session_id, settings.search, settings.search_price,
                                 ledger.today(settings.timezone))
    text = wrap(str(got.get("text") or ""), source=f"{settings.search} search for {query!r}", kind="search results",
                details=f"{got.get('results')} result(s) in the provider's order; read a page "
                        "with web_read")
    return True, text, f"searched: {got.get('results')} result(s)"


def _over_budget(folder: str, settings) -> bool:
    """Would one more search at its price reach the agent's daily or monthly limit? (as the door asks
    of a model call, with the search's price held)"""
    with database.connection_context():
        limits = _limits.of(folder)
        if limits.daily_micro is None and limits.monthly_micro is None:
            return False
        day = ledger.today(settings.timezone)
        return budgets.verdict(limits, ledger.spent(folder, day), day, budgets.micro(settings.search_price)).blocked


def stop() -> None:
    global _pool, _worker
    with _lock:
        pool, worker, _pool, _worker = _pool, _worker, None, None
    if worker is not None:
        worker.stop()
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)


delivery.register_op("web_read", handle_read)
delivery.register_op("web_search", handle_search)


@register_job("web.fetches.prune", every_s=24 * 3600, first_after_s=600)
def prune_log(settings, manager, now=None) -> int:
    """The fetch log is kept as long as the history agents search (NANOCLAW_KEEP_HISTORY_DAYS)."""
    removed = settings_module.prune(settings.keep_history_days, now)
    if removed:
        log.info("removed %d web fetch record(s) older than %d days", removed, settings.keep_history_days)
    return removed
