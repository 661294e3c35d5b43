"""NanoClaw: a self-hosted personal AI-agent host.

The package map (pipe order, and what each part may import) is in docs/architecture.md. The agent's
runner (container/agent_runner) is a package of this project too (pyproject.toml): the host imports
its stdlib-only modules (session_schema, proposal_rules, attachments, nudge) as the one definition
both sides use.
"""

__version__ = "0.1.0"
