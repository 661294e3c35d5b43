"""What each agent may reach of the web (agent_internet; migration 0023_internet) and the fetch log (web_fetches)."""
from __future__ import annotations

import peewee as pw

from ..models import AgentGroup, Base, utcnow


class AgentInternet(Base):
    agent_group = pw.ForeignKeyField(AgentGroup, unique=True, on_delete="CASCADE", column_name="agent_group_id")
    read = pw.CharField()     # on | listed | off
    search = pw.CharField()   # on | off
    browser = pw.CharField()  # on | off
    updated_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "agent_internet"


class WebFetch(Base):
    """One fetch for an agent, as the owner sees it: never the body."""
    agent_folder = pw.CharField()
    session_id = pw.CharField()
    tool = pw.CharField()      # web_read (search and the browser later)
    url = pw.TextField()
    status = pw.IntegerField(null=True)  # the page's HTTP status; None when refused or failed before one
    bytes = pw.IntegerField(default=0)
    outcome = pw.TextField()   # "read", or why not
    fetched_at = pw.DateTimeField(default=utcnow)

    class Meta:
        table_name = "web_fetches"
