"""Session folders and the host's side of the per-session databases."""
import sys

from ..config import PROJECT_ROOT

# The runner's schema module is the one definition both sides use; it lives with the runner.
_container = str(PROJECT_ROOT / "container")
if _container not in sys.path:
    sys.path.insert(0, _container)

from agent_runner import session_schema  # noqa: E402

__all__ = ["session_schema"]
