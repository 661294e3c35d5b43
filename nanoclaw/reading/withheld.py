"""Which reading tools an agent is not offered, told to the sandbox manager at each sandbox start
(the op checks again when it arrives: the owner may change the setting meanwhile)."""
from __future__ import annotations

from ..models import AgentGroup
from ..sandboxes.manager import register_withholder
from .access import BROWSER_TOOLS, withheld
from .browser_sandbox import unavailable
from .settings import current


def tools_withheld(folder: str, settings) -> set[str]:
    configured = getattr(settings, "search", "none") != "none"
    agent = AgentGroup.get_or_none(AgentGroup.folder == folder)
    if agent is None:
        return {"web_read", "web_search", *BROWSER_TOOLS}
    access = current(agent, configured)
    runs = access.browser == "on" and getattr(settings, "browsers", 0) > 0 and unavailable(settings) is None
    return withheld(access, configured, runs)


register_withholder(tools_withheld)
