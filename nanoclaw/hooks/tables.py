"""The hooks the owner registered (webhooks) and the deliveries seen (webhook_deliveries, kept 7
days so a redelivery is acknowledged and ignored); migration 0027_webhooks."""
from __future__ import annotations

import peewee as pw

from ..models import AgentGroup, Base, JSONField, MessagingGroup, utcnow


class Webhook(Base):
    name = pw.CharField(unique=True)
    agent_group = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE", column_name="agent_group_id")
    messaging_group = pw.ForeignKeyField(MessagingGroup, on_delete="CASCADE", column_name="messaging_group_id")
    template = pw.TextField()
    scheme = pw.CharField()          # github | standard | bearer
    secret_env = pw.CharField()      # the name of the host variable holding the secret, never its value
    events = JSONField(default=list)  # GitHub events let through ([]: every one)
    enabled = pw.BooleanField(default=True)
    created_by = pw.CharField()
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "webhooks"


class WebhookDelivery(Base):
    hook = pw.ForeignKeyField(Webhook, on_delete="CASCADE", column_name="hook_id")
    delivery_id = pw.CharField()
    outcome = pw.CharField()         # woke | ignored (event filtered) | malformed
    seen_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "webhook_deliveries"
        indexes = ((("hook", "delivery_id"), True),)


def secret_names() -> list[str]:
    """The hooks' secret variables (reserved: an agent may never ask for a route or a server with one)."""
    from ..db import database
    with database.connection_context():
        return [h.secret_env for h in Webhook.select(Webhook.secret_env)]
