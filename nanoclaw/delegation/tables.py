"""agent_links (which agent may ask which, and how) and agent_asks (each ask, with its chain); migration
0028_agent_links."""
from __future__ import annotations

import peewee as pw

from ..models import AgentGroup, ApproverCard, Base, JSONField, utcnow

MODES = ("ask", "allowed")


class AgentLink(Base):
    from_agent = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE", column_name="from_agent_id")
    to_agent = pw.ForeignKeyField(AgentGroup, on_delete="CASCADE", column_name="to_agent_id")
    mode = pw.CharField()            # ask: each ask waits on a card; allowed: asks go through
    created_by = pw.CharField()
    created_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_links"
        indexes = ((("from_agent", "to_agent"), True),)


class AgentAsk(ApproverCard):
    """One ask: its chain, where its answer goes, and, over an `ask` link, the card it waited on."""
    from_folder = pw.CharField()
    from_session = pw.CharField()
    to_folder = pw.CharField()
    to_session = pw.CharField(null=True)  # set when it is put into the asked agent's session
    request_id = pw.CharField()      # the asking tool's request (its answer row: answer:<request_id>)
    chain = JSONField(default=list)  # the folders from the origin to the asker
    wait_s = pw.IntegerField(default=0)  # 0: the answer arrives as a message
    text = pw.TextField(default="")  # kept only while it waits on the card
    state = pw.CharField(default="open")  # pending (the card) | open | answered | rejected
    decided_by = pw.CharField(null=True)
    asked_at = pw.DateTimeField(default=utcnow)
    answered_at = pw.DateTimeField(null=True)

    class Meta:
        table_name = "agent_asks"
