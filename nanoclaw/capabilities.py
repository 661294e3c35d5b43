"""The capability modules, imported once by create_app so they register their gates, card
actions and system ops. Core code never imports a capability by name; this list is the one place
that names them."""
from . import approvals, operator, questions, scheduling  # noqa: F401
