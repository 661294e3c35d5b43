"""Session folders and the host's side of the per-session databases."""
from agent_runner import session_schema  # the one schema both sides use (container/agent_runner)

__all__ = ["session_schema"]
