"""NanoClaw: a self-hosted personal AI-agent host.

The package map (pipe order, and what each part may import) is in docs/architecture.md.
"""
import sys
from pathlib import Path

__version__ = "0.1.0"

# The runner's stdlib-only modules (container/agent_runner: session_schema, proposal_rules,
# attachments) are the one definition both sides use: the host imports them from there.
_RUNNER_PARENT = str(Path(__file__).resolve().parent.parent / "container")
if _RUNNER_PARENT not in sys.path:
    sys.path.insert(0, _RUNNER_PARENT)
