"""Approvals: the owner's say in chat and on the page (unknown senders and chats, agent questions),
and the registries every card and page item goes through (actions, pending)."""
