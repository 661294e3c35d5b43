"""The service's counters and histograms (prometheus-client), recorded where things happen.

Every room may import this module: it names the metrics and nothing else. The web program serves
them at /metrics; the proxy program records its own in the same registry kinds.
"""
from __future__ import annotations

from prometheus_client import Counter

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
