"""May this ask go, and how (pure): from the link the host has (or none), the chain the asking turn
carries (the folders from the origin to the asker, from the host's own records) and the limits."""
from __future__ import annotations

MAX_DEPTH = 3
MAX_WAIT_S = 600


def refusal(asker: str, asked: str, link_mode: str | None, chain: list[str], max_depth: int = MAX_DEPTH) -> str | None:
    """Why the ask is refused (told to the asking agent), or None."""
    if asked == asker:
        return "an agent cannot ask itself"
    if link_mode is None:
        return f"you have no link to {asked}; only the owner (agent link {asker} {asked}) can make one"
    full = [*chain, asker] if not chain or chain[-1] != asker else chain
    if asked in full:
        return f"{asked} is already in this chain of asks ({' → '.join(full)} → {asked}): a loop is refused"
    if len(full) > max_depth:
        return f"this chain of asks is {len(full)} deep ({' → '.join(full)}); at most {max_depth} agents may ask on"
    return None


def wait_seconds(wait) -> int:
    """The asker's wait, clamped (pure): 0 for none, at most MAX_WAIT_S."""
    if wait in (None, False, "", 0):
        return 0
    if wait is True:
        return MAX_WAIT_S
    try:
        return max(0, min(MAX_WAIT_S, int(wait)))
    except (TypeError, ValueError):
        return MAX_WAIT_S
