"""The service's counters and histograms (prometheus-client), recorded where things happen.

Every room may import this module: it names the metrics and nothing else. The web program serves
them at /metrics. Under `make run` every program writes them to $PROMETHEUS_MULTIPROC_DIR
(prometheus-client's multiprocess mode), so /metrics shows the proxy's model requests beside the
web program's counts; figures that are read at scrape time (sandboxes, pending items) come from
web/health.py.
"""
from __future__ import annotations

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
MODEL_REQUESTS = Counter(
    "nanoclaw_model_requests_total", "Model API requests through the proxy, by the upstream's status class "
    "(2xx, 4xx, 429, 5xx) or 'unreachable'.", ["status"])
MODEL_REQUEST_SECONDS = Histogram(
    "nanoclaw_model_request_seconds", "Model API requests through the proxy: until the upstream's response "
    "headers (the start of the stream).", buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120))
SWEEP_ACTIONS = Counter(
    "nanoclaw_sweep_actions_total", "What the sweep did: stopped (idle or stuck), reset (stuck claims given "
    "back), failed (given up), woken (due work).", ["action"])
TASK_RUNS = Counter("nanoclaw_task_runs_total", "Scheduled task runs fired.")
TASK_LATENESS_SECONDS = Histogram(
    "nanoclaw_task_lateness_seconds", "How late a scheduled task run fired after its due time.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 60, 300))


def status_class(status: int) -> str:
    return "429" if status == 429 else f"{status // 100}xx"
