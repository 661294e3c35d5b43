"""The capability modules, imported once by create_app so they register their router gates, card
actions, system ops, housekeeping jobs and page items. Core code never imports a capability by
name; this list is the one place that names them."""
from .approvals import agent_cards, chats, pairing, questions, senders  # noqa: F401  (cards; approvals; pairing)
from .operator import expiry, help_requests, proposals, waiting  # noqa: F401  (ask_operator, proposals)
from .tasks import ops  # noqa: F401  (the agent's scheduling tools)
