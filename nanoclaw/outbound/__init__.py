"""Outbound: the agent's rows in outbound.db delivered through the channel adapters."""
