"""Inbound: from an accepted platform event to rows in the right sessions' inbound.db (and a wake)."""
