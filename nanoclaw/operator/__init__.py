"""Operator control for agents: help requests, proposals, and applying what was approved.

    help_requests.py  ask_operator rows -> help_requests + a card; the reply (card reply, page) -> the agent
    proposals.py      proposal rows -> pending_proposals + a card; npr-<id>:approve|reject decides
    checks.py         the host's own check of every proposal, and its readable diff (pure)
    apply.py          approved -> the policy files the proxy reads, the group's image, its MCP servers, a new agent
    restart.py        restart a group's sandboxes on the same sessions (the SDK conversation resumes)
    waiting.py        the items for the operator page's "Waiting on you"

Importing help_requests, proposals and waiting registers their system ops, card actions, router gates
and page providers (nanoclaw/service.py does).
"""
