"""Getting a sandbox runtime while the service already runs: the agent image built in the
background (new sandboxes move to Docker once it is there), and a word to each chat that waits."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..channels.base import get_adapter
from ..runtime.base import known_secrets
from ..runtime.image import build_ca_bundle, build_image
from ..runtime.switching import SwitchingRuntime
from ..sessions import store

log = logging.getLogger("nanoclaw.background")


@dataclass
class BuildStatus:
    """The background build of the agent image, as the log and `doctor` can tell it."""
    state: str = "idle"          # idle | building | built | failed
    step: str = ""
    error: str = ""


BUILD = BuildStatus()


def build_in_background(manager, settings, client) -> None:
    """Build the agent image; then new sandboxes start in Docker (or, with no runtime yet, the
    runtime check finds Docker at its next look)."""
    log.info("the Docker engine has no %s: building it now (a few minutes; the log shows the steps)",
             settings.agent_image)
    started = time.monotonic()
    BUILD.state, BUILD.step, BUILD.error = "building", "", ""

    def progress(line: str) -> None:
        if line.startswith(("Step ", "building ", "built ")) or "debootstrap" in line:
            BUILD.step = line.strip()[:200]
            log.info("image build: %s", BUILD.step)
    try:
        build_image(settings, ca_bundle=build_ca_bundle(), progress=progress, client=client)
    except Exception as exc:
        BUILD.state, BUILD.error = "failed", str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.error("building %s failed: %s; run `flask --app app nanoclaw image build` to see why",
                  settings.agent_image, BUILD.error)
        return
    if manager is not None and isinstance(manager.runtime, SwitchingRuntime):
        from ..runtime import docker as docker_rt  # the SDK only once there is an engine to use
        manager.runtime.switch_to(docker_rt.DockerRuntime(client, image=settings.agent_image,
                                                          secrets=known_secrets(settings)))
    BUILD.state = "built"
    log.info("built %s in %.0f s; new sandboxes start in Docker", settings.agent_image, time.monotonic() - started)


def tell_once(settings, text: str):
    """A waker for while nothing can start a sandbox: tell each session's chat once why it waits."""
    told: set[str] = set()

    def waker(folder: str, session_id: str) -> None:
        if session_id in told:
            return
        told.add(session_id)
        try:
            target = store.routing_of(store.session_path(settings.sessions_dir, folder, session_id))
            if target is not None:
                get_adapter(target.channel_type, settings).send_text(target, text)
        except Exception as exc:
            log.warning("could not tell %s/%s that its agent is being set up: %s", folder, session_id, exc)
    return waker
