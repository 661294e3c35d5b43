"""Agents asking agents (issue 65, items 1-4): links the host owns (`tables`: which agent may ask which,
and the asks under way), who may ask and what a chain may do (`decide`, pure), the `ask_agent` op
(`ops`: checked from the host's records, written into the asked agent's own session for that link),
and the `agent` channel its answers go out on, back to the asking agent inside the envelope
(`channel`)."""
