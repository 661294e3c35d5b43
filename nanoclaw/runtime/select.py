"""Which sandbox runtime this host uses: NANOCLAW_RUNTIME, or the first that works (auto)."""
from __future__ import annotations

from typing import Callable

from . import bwrap
from .base import Runtime, RuntimeUnavailable, known_secrets

# docker.py and image.py load the docker SDK: imported where Docker may be used, so a bwrap
# install's programs never load it (1.7 MiB resident).


def _say(log) -> Callable[[str], None]:
    return log.info if hasattr(log, "info") else log


REMOTE_SCHEMES = ("tcp://", "ssh://", "http://", "https://")


def session_transport(choice: str, engine_url: str | None) -> str:
    """files or network (pure): NANOCLAW_SESSION_TRANSPORT, where auto means network exactly when the
    Docker engine is on another machine (it cannot see this one's folders)."""
    if choice != "auto":
        return choice
    return "network" if engine_url and engine_url.startswith(REMOTE_SCHEMES) else "files"


def _docker(settings, client, where: str, secrets) -> Runtime:
    from . import docker as docker_rt
    transport = session_transport(getattr(settings, "session_transport", "auto"), where)
    if transport == "files":
        return docker_rt.DockerRuntime(client, image=settings.agent_image, secrets=secrets)
    from ..remote.access import DoorAccess  # noqa: E402 - only a remote engine needs the door
    try:
        door = DoorAccess(settings)
    except (ValueError, OSError) as exc:
        raise RuntimeUnavailable(f"the Docker engine at {where} gets sandboxes over the network, but {exc}") from None
    return docker_rt.DockerRuntime(client, image=settings.agent_image, secrets=secrets, door=door,
                                   network=settings.sandbox_network, relay_network=settings.door_relay_network)


def _kubernetes(settings, secrets) -> Runtime:
    from ..remote.access import DoorAccess  # noqa: E402 - only a cluster needs these
    from . import kubernetes as k8s
    if getattr(settings, "session_transport", "auto") == "files":
        raise RuntimeUnavailable("NANOCLAW_RUNTIME=kubernetes needs the network transport (pods cannot see this "
                                 "machine's folders); set NANOCLAW_SESSION_TRANSPORT=auto or network")
    try:
        door = DoorAccess(settings)
        client = k8s.connect(settings.k8s_namespace)
    except Exception as exc:  # noqa: BLE001 - kubeconfig problems come in many types; say which
        raise RuntimeUnavailable(f"NANOCLAW_RUNTIME=kubernetes but {exc}") from None
    return k8s.KubernetesRuntime(client, namespace=settings.k8s_namespace, image=settings.agent_image, door=door,
                                 secrets=secrets, runtime_class=settings.k8s_runtime_class)


def select_runtime(settings, log) -> Runtime:
    """NANOCLAW_RUNTIME: docker | bwrap | kubernetes | auto (docker if an engine answers and the
    image is there, else bwrap if it works, else RuntimeUnavailable saying what to do)."""
    say = _say(log)
    secrets = known_secrets(settings)
    choice = settings.runtime
    if choice == "kubernetes":
        runtime = _kubernetes(settings, secrets)
        say(f"sandbox runtime: kubernetes (namespace {settings.k8s_namespace}, image {settings.agent_image}, "
            f"door {settings.door_url})")
        return runtime

    if choice in ("docker", "auto"):
        from . import docker as docker_rt
        from .image import image_exists
        client, where = docker_rt.connect()
        if client is not None:
            if image_exists(settings, client=client):
                runtime = _docker(settings, client, where, secrets)
                say(f"sandbox runtime: docker (engine at {where}, image {settings.agent_image}, sessions over "
                    f"{'the network' if runtime.door else 'shared folders'})")
                return runtime
            why = (f"the Docker engine at {where} answers but has no image {settings.agent_image}; "
                   "build it with: flask --app app nanoclaw image build")
        else:
            why = (f"no Docker engine answers ({where}); start one (scripts/docker-engine.sh start, "
                   "then DOCKER_HOST=unix:///run/nanoclaw-docker/docker.sock) or install Docker")
        if choice == "docker":
            raise RuntimeUnavailable(f"NANOCLAW_RUNTIME=docker but {why}")
        say(f"sandbox runtime: not docker, because {why}")

    if getattr(settings, "session_transport", "auto") == "network":
        raise RuntimeUnavailable("NANOCLAW_SESSION_TRANSPORT=network needs a Docker engine (bubblewrap sandboxes "
                                 "run on this machine and have no network); set it to auto or files")
    problem = bwrap.probe()
    if problem is None:
        say("sandbox runtime: bwrap (bubblewrap works here)")
        return bwrap.BwrapRuntime(settings.data_dir / "run" / "bwrap", secrets=secrets)
    if choice == "bwrap":
        raise RuntimeUnavailable(f"NANOCLAW_RUNTIME=bwrap but bubblewrap does not work: {problem}. "
                                 "Install it with scripts/install-sandboxes.sh bwrap (apt-get install bubblewrap)")
    raise RuntimeUnavailable(
        f"no sandbox runtime: {why}; and bubblewrap does not work ({problem}). "
        "Fix one: build the Docker image (flask --app app nanoclaw image build) with an engine running, "
        "or install bubblewrap (scripts/install-sandboxes.sh bwrap)")


def setup_action(runtime: str, bwrap_installed: bool, is_root: bool, has_apt: bool) -> str:
    """What `make run` does when no sandbox runtime works (pure): 'install' bubblewrap itself (it
    can: root and apt), or 'tell' the one command to run (then the service starts anyway)."""
    if runtime == "docker" or bwrap_installed:
        return "tell"  # Docker is the user's to start; an installed bwrap that fails is not fixed by apt
    return "install" if is_root and has_apt else "tell"


def image_to_build(settings):
    """A Docker client when Docker may be used (NANOCLAW_RUNTIME auto or docker), an engine answers
    and only the agent image is missing: building it makes Docker usable. None otherwise."""
    if settings.runtime not in ("auto", "docker"):
        return None
    from . import docker as docker_rt
    from .image import image_exists
    client, _where = docker_rt.connect()
    if client is None or image_exists(settings, client=client):
        return None
    return client
