"""Per-group images do not pile up, and a deleted agent leaves nothing running.

An approved install_packages builds `nanoclaw-agent-<folder>:<hash>` (runtime/image.py) and the
group's sandboxes restart on it; the image it replaced is removed once no container uses it (at
once when nothing runs it, else by this job a few minutes later). Deleting an agent stops its
sandboxes and removes its images. Only the repositories of this install's agent groups are
looked at, never the engine's other images. bwrap sandboxes run the host's own programs: they
have no image, so there is nothing to prune there.
"""
from __future__ import annotations

import logging

from .housekeeping import register_job
from ..db import announce
from ..models import AgentGroup
from ..sandboxes.manager import sandbox_name
from ..runtime.base import RuntimeUnavailable
from ..runtime.select import select_runtime

log = logging.getLogger("nanoclaw.image_prune")

CHECK_S = 600.0
FIRST_CHECK_S = 120.0


# runtime/image.py and runtime/docker.py load the docker SDK: imported where used, so a bwrap
# install's web program never loads it (1.7 MiB resident).


def current_group_image(agent: AgentGroup) -> str | None:
    """The group's own image, if it has one (else it runs the default agent image)."""
    from ..runtime.image import group_image_repo
    image = (agent.container_config or {}).get("image")
    return image if image and image.startswith(group_image_repo(agent.folder) + ":") else None


@register_job("images.prune_groups", every_s=CHECK_S, first_after_s=FIRST_CHECK_S)
def prune_stale_images(settings, manager) -> list[str]:
    """Each group with an image of its own: remove its older images that no container uses."""
    if manager is None or manager.runtime.name != "docker":
        return []
    from ..runtime.image import prune_group_images
    removed = []
    for agent in AgentGroup.select():
        image = current_group_image(agent)
        if image is not None:
            removed += prune_group_images(agent.folder, {image}, client=manager.runtime.client)
    return removed


def forget_agent(settings, folder: str, session_ids: list[str]) -> tuple[list[str], list[str]]:
    """After an agent group was deleted: stop its running sandboxes, remove its images.
    Returns (stopped sandbox names, removed image tags); best effort, it never raises."""
    announce(settings.data_dir, "proxy")  # its door closes now
    stopped: list[str] = []
    try:
        runtime = select_runtime(settings, lambda _line: None)
    except RuntimeUnavailable:
        runtime = None
    try:
        running = set(runtime.list_sandboxes(settings.install_id)) if runtime is not None else set()
        for session_id in session_ids:
            name = sandbox_name(settings.install_id, folder, session_id)
            if name in running:
                runtime.stop(name)
                stopped.append(name)
    except Exception as exc:  # the next start of the service removes what is left as orphans
        log.warning("could not stop the sandboxes of %s: %s", folder, exc)
    removed: list[str] = []
    if settings.runtime != "bwrap":
        from ..runtime import docker as docker_rt
        from ..runtime.image import prune_group_images
        client = runtime.client if runtime is not None and runtime.name == "docker" else docker_rt.connect()[0]
        if client is not None:
            try:
                removed = prune_group_images(folder, set(), client=client)
            except Exception as exc:  # the engine went away: the images stay, the agent is gone anyway
                log.warning("could not remove the images of %s: %s", folder, exc)
    return stopped, removed
