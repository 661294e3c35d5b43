"""What an agent may reach of the web, decided from the host's records. Pure.

`read`: on (any page the address check admits), listed (only hosts on the agent's egress allowlist),
off. An agent with no row was created after reading landed: read on, search on when a provider is
set up, browser off. Agents that existed before got a row saying listed/off/off (migration 0023), so
nothing they can reach changed without the owner. A tool is offered only when the agent may use it.
"""
from __future__ import annotations

from dataclasses import dataclass

READ_MODES = ("on", "listed", "off")
SWITCH = ("on", "off")
BROWSER_TOOLS = ("browser_open", "browser_snapshot", "browser_click", "browser_type", "browser_screenshot",
                 "browser_close")
TOOLS = {"read": ("web_read",), "search": ("web_search",), "browser": BROWSER_TOOLS}


@dataclass(frozen=True)
class Access:
    read: str = "on"
    search: str = "off"
    browser: str = "off"


def access_of(row, search_configured: bool = False) -> Access:
    """The agent's row (None: the defaults of an agent created after reading landed)."""
    if row is None:
        return Access(read="on", search="on" if search_configured else "off", browser="off")
    return Access(read=row.read if row.read in READ_MODES else "off", search=row.search if row.search in SWITCH else "off",
                  browser=row.browser if row.browser in SWITCH else "off")


def withheld(access: Access, search_configured: bool = False, browser_runs: bool = True) -> set[str]:
    """Tools of ours not offered to the model (search also while no provider is set up, the browser
    while none can run on this host)."""
    off = {tool for what, tools in TOOLS.items() if getattr(access, what) == "off" for tool in tools}
    return off | (set() if search_configured else {"web_search"}) | (set() if browser_runs else set(BROWSER_TOOLS))


def search_refusal(access: Access, search_configured: bool) -> str | None:
    if not search_configured:
        return "no search provider is set up on this host; the owner sets one with NANOCLAW_SEARCH"
    if access.search == "off":
        return "web search is off for this agent; the owner can turn it on (internet set)"
    return None


def read_refusal(access: Access, host: str, port: int, listed) -> str | None:
    """Why this agent may not read host:port, or None. listed(host, port) says whether the agent's
    egress allowlist admits it."""
    if access.read == "off":
        return "reading the web is off for this agent; the owner can turn it on (internet set)"
    if access.read == "listed" and not listed(host, port):
        shown = host if port in (80, 443) else f"{host}:{port}"
        return (f"this agent reads only the hosts on its egress allowlist, and {shown} is not one; ask the owner "
                f"with propose_egress (host {shown!r})")
    return None


@dataclass
class RateWindow:
    """At most `limit` reads per session in any `seconds`; the clock is the caller's."""
    limit: int = 30
    seconds: float = 60.0

    def __post_init__(self):
        self._times: dict[str, list[float]] = {}

    def admit(self, key: str, now: float) -> float | None:
        """None when admitted (and counted); else the seconds until the next read may go."""
        times = [t for t in self._times.get(key, []) if now - t < self.seconds]
        if len(times) >= self.limit:
            self._times[key] = times
            return self.seconds - (now - times[0])
        times.append(now)
        self._times[key] = times
        return None


def changed(current: Access, read: str | None, search: str | None, browser: str | None) -> Access:
    """The setting after an owner's change; ValueError names a value that is not one."""
    for name, value, allowed in (("read", read, READ_MODES), ("search", search, SWITCH), ("browser", browser, SWITCH)):
        if value is not None and value not in allowed:
            raise ValueError(f"--{name} takes {' or '.join(allowed)}, not {value!r}")
    return Access(read=read or current.read, search=search or current.search, browser=browser or current.browser)
