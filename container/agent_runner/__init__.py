"""The agent runner: runs inside the sandbox, one per session."""
