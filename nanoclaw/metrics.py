"""The service's counters and histograms (prometheus-client), recorded where things happen.

Every room may import this module: it names the metrics and nothing else. The web program serves
them at /metrics. Under `make run` every program writes them to $PROMETHEUS_MULTIPROC_DIR
(prometheus-client's multiprocess mode), so /metrics shows the proxy's model requests beside the
web program's counts; figures that are read at scrape time (sandboxes, pending items) come from
web/health.py.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from prometheus_client import Counter, Histogram

WEBHOOKS_MALFORMED = Counter(
    "nanoclaw_webhooks_malformed_total",
    "Authentic webhook requests whose payload did not fit the platform's schema (answered, not routed).",
    ["channel", "kind"])
WEBHOOKS_REFUSED = Counter(
    "nanoclaw_webhooks_refused_total", "Webhook requests refused before parsing (signature, method, size).",
    ["channel", "status"])
WEBHOOKS_UNAVAILABLE = Counter(
    "nanoclaw_webhooks_unavailable_total",
    "Webhook requests answered 503 because an event could not be stored (the platform retries).", ["channel"])
MESSAGES_IN = Counter(
    "nanoclaw_messages_in_total",
    "Messages routed, by channel and outcome (written to a session, handled by a gate, dropped with a "
    "reason, or a duplicate).", ["channel", "outcome", "reason"])
REPLIES_OUT = Counter(
    "nanoclaw_replies_out_total",
    "Outbound rows (replies, cards, files, reactions) by channel and result: sent, retry (will be tried "
    "again), failed (given up).", ["channel", "result"])
ANSWER_SECONDS = Histogram(
    "nanoclaw_answer_seconds",
    "From a triggering message (its time, or its due time) to the agent finishing it, as the host notices; "
    "by channel.", ["channel"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600))
TURN_SECONDS = Histogram(
    "nanoclaw_turn_seconds",
    "An agent's turn on a chat message, by the host's clock: from the delivery pass that first saw the agent "
    "claim it to the pass that saw it finished; by channel.", ["channel"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600))
MODEL_REQUESTS = Counter(
    "nanoclaw_model_requests_total", "Model API requests through the proxy, by the upstream's status class "
    "(2xx, 4xx, 429, 5xx) or 'unreachable'.", ["status"])
MODEL_REQUEST_SECONDS = Histogram(
    "nanoclaw_model_request_seconds", "Model API requests through the proxy: until the upstream's response "
    "headers (the start of the stream).", buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
FIRST_MODEL_REQUEST_SECONDS = Histogram(
    "nanoclaw_first_model_request_seconds", "From the host's commit of a message or task that starts a turn "
    "to the next model request from that agent's sandboxes (a cold start included).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60))
SWEEP_ACTIONS = Counter(
    "nanoclaw_sweep_actions_total", "What the sweep did: stopped (idle or stuck), reset (stuck claims given "
    "back), failed (given up), woken (due work).", ["action"])
VOICE_ANSWERS = Counter(
    "nanoclaw_voice_answers_total", "Answers to be spoken, by outcome: sent (as a voice note with its text), "
    "too_long, turn_cap, speech_failed or platform_refused (each sent as text only).", ["outcome"])
SWEEP_PASSES = Counter(
    "nanoclaw_sweep_passes_total", "Sweep passes completed (liveness, stuck claims, retries, idle stops).")
MODEL_TOKENS = Counter(
    "nanoclaw_model_tokens_total", "Tokens the model calls reported, by agent, model and kind (input, output, "
    "cache_write, cache_read).", ["agent", "model", "kind"])
MODEL_COST = Counter(
    "nanoclaw_model_cost_usd_total", "What the model calls cost by the price table (USD), by agent and model; "
    "a model the table does not know is priced at the dearest known rate.", ["agent", "model"])
MODEL_FAILOVERS = Counter(
    "nanoclaw_model_failovers", "Model calls the door moved to the next model of an agent's chain, by agent and "
    "upstreams (from, to); to='none' when the whole chain failed", ["agent", "from_upstream", "to_upstream"])
MODEL_FREE_INSTEAD = Counter(
    "nanoclaw_model_budget_free_calls", "Model calls sent to a free model of an agent's chain because its budget "
    "was spent, by agent", ["agent"])
TRANSCRIPTIONS = Counter(
    "nanoclaw_transcriptions_total", "Voice notes and audio sent to the speech-to-text service, by outcome (ok, "
    "unset, too_long, refused, failed).", ["outcome"])
TASK_RUNS = Counter("nanoclaw_task_runs_total", "Scheduled task runs fired.")
TASK_LATENESS_SECONDS = Histogram(
    "nanoclaw_task_lateness_seconds", "How late a scheduled task run fired after its due time.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 60, 300))


def status_class(status: int) -> str:
    return "429" if status == 429 else f"{status // 100}xx"


# --- time to the first model request ---------------------------------------------------------------
# Both ends are the host's own records, never the agent's: the writer of a message that starts a turn
# leaves a mark per agent folder (the commit's time, in a host-only folder), and the proxy's first
# model request through that folder's door takes it. The mark of the oldest unserved message stays.

def awaiting_dir(data_dir) -> Path:
    return Path(data_dir) / "run" / "awaiting-model"


def mark_awaiting(data_dir, folder: str, at: float) -> None:
    marks = awaiting_dir(data_dir)
    try:
        fd = os.open(marks / folder, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except FileNotFoundError:
        marks.mkdir(parents=True, exist_ok=True)
        return mark_awaiting(data_dir, folder, at)
    with os.fdopen(fd, "w") as f:
        f.write(repr(at))


def take_awaiting(data_dir, folder: str) -> float | None:
    """The mark's time, once: the request that unlinks it observes it."""
    mark = awaiting_dir(data_dir) / folder
    try:
        at = float(mark.read_text())
        mark.unlink()
    except (OSError, ValueError):
        return None
    return at


AWAITING_STALE_S = 600  # a mark no request took this long (a turn that never asked the model, e.g.
#                        /clear) would turn the next message's figure into hours: it is dropped


def observe_first_request(data_dir, folder: str, arrived: float | None = None) -> None:
    """`arrived`: when the request came (time.time()), if it is observed later than that."""
    at = take_awaiting(data_dir, folder)
    if at is not None and (waited := (arrived or time.time()) - at) <= AWAITING_STALE_S:
        FIRST_MODEL_REQUEST_SECONDS.observe(max(0.0, waited))
