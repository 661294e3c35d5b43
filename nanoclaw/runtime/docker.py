"""Docker runtime: one container per session, through the docker SDK.

No network (network_mode none), user 1000:1000, read-only root with tmpfs /tmp, all
capabilities dropped, memory/cpu/pids limits, the mounts of base.py. Containers are not
auto-removed, so a crashed one can be inspected (`docker logs NAME`); stop() removes.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.utils import kwargs_from_env
from docker.constants import DEFAULT_DOCKER_API_VERSION
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import LogConfig, Mount as DockerMount

from .access import grant_to_sandbox_user
from .base import (GLOBAL_TARGET, GROUP_TARGET, PACKAGES_TARGET, SKILLS_TARGET, INBOUND_TARGET, INSTALL_LABEL, PROXY_TARGET,
                   PYTHONPATH, RUNNER_TARGET, SESSION_TARGET, NameLocks, SandboxSpec, check_spec, extra_target,
                   prepare_session, sandbox_env)

log = logging.getLogger("nanoclaw.runtime.docker")

# The engine scripts/docker-engine.sh starts; tried when DOCKER_HOST is not set.
OWN_ENGINE = "unix:///run/nanoclaw-docker/docker.sock"
DEFAULT_ENGINE = "unix:///var/run/docker.sock"


def _pinned(client: docker.DockerClient) -> docker.DockerClient:
    """An engine reached over TLS with its own CA keeps that CA: requests would let
    REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE (set on machines behind an intercepting proxy) replace it for
    every request, and the handshake fail with "unable to get local issuer certificate"."""
    if isinstance(client.api.verify, str):
        client.api.trust_env = False
    return client


def from_environment(timeout: float) -> docker.DockerClient:
    """docker.from_env (DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH), with the engine's CA kept:
    the API version is asked first (unversioned /version) by a client already pinned, because
    from_env would ask it in its constructor, before anything can be pinned."""
    settings = kwargs_from_env()
    if str(settings.get("base_url", "")).startswith("ssh://"):
        settings["use_ssh_client"] = True  # the machine's own `ssh` (its keys and config), not paramiko
    probe = _pinned(docker.DockerClient(version=DEFAULT_DOCKER_API_VERSION, timeout=timeout, **settings))
    try:
        version = probe.api.version(api_version=False)["ApiVersion"]
    finally:
        probe.close()
    return _pinned(docker.DockerClient(version=version, timeout=timeout, **settings))


def connect(timeout: float = 3.0) -> tuple[docker.DockerClient | None, str]:
    """A client for the engine that answers a ping, and where it is.

    DOCKER_HOST wins when set; otherwise the system engine, then NanoClaw's own.
    """
    from_env = bool(os.environ.get("DOCKER_HOST"))
    candidates = [os.environ["DOCKER_HOST"]] if from_env else [DEFAULT_ENGINE, OWN_ENGINE]
    for url in candidates:
        try:
            client = from_environment(timeout) if from_env else docker.DockerClient(base_url=url, timeout=timeout)
            client.ping()
        except (DockerException, OSError):
            continue
        client.api.timeout = 120  # the ping was short; real calls (create, stop) may take longer
        return client, url
    return None, " or ".join(candidates)


TMPFS = {"/tmp": "rw,nosuid,nodev,size=512m", "/var/tmp": "rw,nosuid,nodev,size=64m"}
RELAY_TARGET = "/run/nanoclaw-door"   # where a remote sandbox and its door relay share the relay's socket
RELAY_SOCKET = "door.sock"
RELAY_LABEL = "nanoclaw.door-relay-of"


def relay_names(sandbox: str) -> tuple[str, str]:
    """The door relay's container and volume names for a sandbox."""
    return f"{sandbox}-door-relay", f"{sandbox}-door"


def remote_workspace(spec: SandboxSpec) -> dict[str, str]:
    """A sandbox on another engine keeps its copies of the session's folders in memory of its own
    (remote.py in the runner fills them from the door): the sandbox user's, nobody else's."""
    owner = f"uid={spec.uid},gid={spec.gid},mode=0700"
    folders = {SESSION_TARGET: f"rw,nosuid,nodev,size=1g,{owner}", INBOUND_TARGET: f"rw,nosuid,nodev,size=512m,{owner}",
               GROUP_TARGET: f"rw,nosuid,nodev,size=1g,{owner}", GLOBAL_TARGET: f"rw,nosuid,nodev,size=256m,{owner}"}
    if spec.packages_dir is not None:  # the agent's approved packages, fetched from the door at start
        folders[PACKAGES_TARGET] = f"rw,nosuid,nodev,size=1g,{owner}"
    return folders


def docker_mounts(spec: SandboxSpec) -> list[DockerMount]:
    def bind(host: Path, target: str, ro: bool) -> DockerMount:
        return DockerMount(target=target, source=str(Path(host).resolve()), type="bind", read_only=ro)

    mounts = [
        bind(spec.session_dir, SESSION_TARGET, False),
        bind(spec.inbound_dir, INBOUND_TARGET, True),
        bind(spec.group_dir, GROUP_TARGET, False),
        bind(spec.runner_dir, RUNNER_TARGET, True),
        bind(spec.proxy_dir, PROXY_TARGET, True),
    ]
    if spec.global_dir is not None:
        mounts.append(bind(spec.global_dir, GLOBAL_TARGET, True))
    if spec.packages_dir is not None:
        mounts.append(bind(spec.packages_dir, PACKAGES_TARGET, True))
    if spec.skills_dir is not None:
        mounts.append(bind(spec.skills_dir, SKILLS_TARGET, True))
    mounts += [bind(m.host, extra_target(m), m.readonly) for m in spec.extra_mounts]
    return mounts


def proc_start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot; /proc/PID/stat field 22), or None when
    there is no such process. A pid the kernel hands out again comes with another start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # the name in (...) may hold spaces and brackets
    return fields[19].decode() if len(fields) > 19 else None


def in_container(pid: int, container_id: str) -> bool:
    """Whether host process `pid` is in the container's cgroup (so this host sees the engine's pids:
    not so for an engine in a VM or on another machine, nor for a host that runs in a container)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            return container_id in f.read()
    except OSError:
        return False


@dataclass(frozen=True)
class SeenRunning:
    """A container's first process as the engine reported it while the container ran."""
    pid: int
    started: str

    def still_runs(self) -> bool:
        return proc_start_time(self.pid) == self.started


class DockerRuntime:
    name = "docker"

    def __init__(self, client: docker.DockerClient, *, image: str, secrets=(), door=None,
                 network: str | None = None, relay_network: str = "bridge"):
        """door: for an engine that cannot see this machine's folders (remote.access.DoorAccess): the
        sandbox then gets no bind mount at all, only the door's address and its pass. It has no
        network: a door relay beside it (relay_network: the engine's network that reaches the door)
        is its one way out, to the door only. `network` names a network the sandbox joins instead,
        the operator's explicit choice (it then reaches whatever that network reaches)."""
        self.client = client
        self.image = image
        self.secrets = list(secrets)
        self.door = door
        self.network = network
        self.relay_network = relay_network or "bridge"
        self._locks = NameLocks()
        # name -> the running container's init process, when this host can see it. Every wake asks
        # whether the session's sandbox runs; asking the engine costs ~1 ms of this process's CPU
        # and some of the engine's, in the middle of the agent's turn. While that process lives
        # the container runs (it is the container's pid 1), so /proc answers instead. (One paused
        # by hand would still count as running: NanoClaw never pauses a container.)
        self._seen: dict[str, SeenRunning] = {}

    def _get(self, name: str):
        try:
            return self.client.containers.get(name)
        except NotFound:
            return None

    def start(self, spec: SandboxSpec) -> None:
        check_spec(spec, self.secrets)
        with self._locks(spec.name):
            existing = self._get(spec.name)
            if existing is not None:
                if existing.status in ("running", "restarting"):
                    return
                # A dead one keeps the name: say how it ended, then make room.
                log.warning("sandbox %s had exited (%s); last output:\n%s", spec.name, existing.status,
                            self._tail(existing))
                existing.remove(force=True)
            image = spec.image or self.image
            try:  # containers.run would try to pull a missing image from a registry: never wanted here
                self.client.images.get(image)
            except ImageNotFound:
                raise RuntimeError(f"no image {image} on this Docker engine (agent images are built here, "
                                   "never pulled)") from None
            prepare_session(spec)
            if self.door is None:
                grant_to_sandbox_user(spec.session_dir, spec.inbound_dir, spec.group_dir, spec.uid, spec.gid)
                env, mounts, network, tmpfs = sandbox_env(spec), docker_mounts(spec), "none", dict(TMPFS)
            else:
                if spec.extra_mounts:
                    raise RuntimeError("extra mounts are folders of this machine, which a sandbox on another "
                                       "engine cannot have; remove them from the agent group, or run its sandboxes "
                                       "on a local engine (NANOCLAW_SESSION_TRANSPORT=files)")
                env, mounts = {**sandbox_env(spec), **self.door.env_for(spec)}, []
                tmpfs = {**TMPFS, **remote_workspace(spec)}  # approved packages come through the door into theirs
                if self.network:
                    network = self.network
                    log.warning("sandbox %s joins the engine's network %r (NANOCLAW_SANDBOX_NETWORK): it reaches "
                                "whatever that network reaches, not only the door", spec.name, network)
                else:
                    network = "none"
                    mounts.append(self._start_relay(spec, image, env["NANOCLAW_DOOR_URL"]))
                    env["NANOCLAW_DOOR_SOCKET"] = f"{RELAY_TARGET}/{RELAY_SOCKET}"
            try:
                self.client.containers.run(
                    image,
                    command=list(spec.command),
                    name=spec.name,
                    detach=True,
                    auto_remove=False,
                    init=True,
                    user=f"{spec.uid}:{spec.gid}",
                    environment=env,
                    working_dir=GROUP_TARGET,
                    network_mode=network,
                    mem_limit=f"{spec.memory_mb}m",
                    memswap_limit=f"{spec.memory_mb}m",
                    nano_cpus=int(spec.cpus * 1e9),
                    pids_limit=spec.pids,
                    labels=dict(spec.labels),
                    mounts=mounts,
                    read_only=True,
                    tmpfs=tmpfs,
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges"],
                    log_config=LogConfig(type="json-file", config={"max-size": "10m", "max-file": "3"}),
                )
            except APIError as exc:
                # Another process won the race for the name: that one is the sandbox.
                if exc.status_code == 409 and self.is_running(spec.name):
                    return
                raise

    def _start_relay(self, spec: SandboxSpec, image: str, door_url: str) -> DockerMount:
        """The door relay beside a remote sandbox: a container on `relay_network` that takes the
        sandbox's connections on a unix socket in a volume they share and copies them to the door's
        address (never elsewhere). Made anew with each start; the mount the sandbox gets."""
        from urllib.parse import urlsplit
        door = urlsplit(door_url)
        name, volume = relay_names(spec.name)
        self._remove_relay(spec.name)
        self.client.volumes.create(name=volume, driver="local", labels={RELAY_LABEL: spec.name}, driver_opts={
            "type": "tmpfs", "device": "tmpfs", "o": f"size=1m,uid={spec.uid},gid={spec.gid},mode=0700"})
        self.client.containers.run(
            image, command=["python3", "-m", "agent_runner.door_relay", f"{RELAY_TARGET}/{RELAY_SOCKET}",
                            door.hostname, str(door.port or 443)],
            name=name, detach=True, auto_remove=False, init=True, user=f"{spec.uid}:{spec.gid}",
            environment={"PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1"}, network_mode=self.relay_network,
            mem_limit="64m", memswap_limit="64m", nano_cpus=int(0.25e9), pids_limit=32, labels={RELAY_LABEL: spec.name},
            mounts=[DockerMount(target=RELAY_TARGET, source=volume, type="volume")], read_only=True,
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            log_config=LogConfig(type="json-file", config={"max-size": "1m", "max-file": "2"}))
        return DockerMount(target=RELAY_TARGET, source=volume, type="volume")

    def _remove_relay(self, sandbox: str) -> None:
        name, volume = relay_names(sandbox)
        for remove in (lambda: self.client.containers.get(name).remove(force=True),
                       lambda: self.client.volumes.get(volume).remove(force=True)):
            try:
                remove()
            except NotFound:
                pass
            except APIError as exc:
                log.warning("could not remove the door relay of %s: %s", sandbox, exc)

    def is_running(self, name: str) -> bool:
        seen = self._seen.get(name)
        if seen is not None and seen.still_runs():
            return True
        container = self._get(name)
        running = container is not None and container.status in ("running", "restarting")
        if running and container.status == "running":
            self._note_running(name, container)
        else:
            self._seen.pop(name, None)
        return running

    def _note_running(self, name: str, container) -> None:
        pid = (container.attrs.get("State") or {}).get("Pid") or 0
        started = proc_start_time(pid) if pid > 0 and in_container(pid, container.id) else None
        if started is not None:
            self._seen[name] = SeenRunning(pid, started)

    def stop(self, name: str, timeout: float = 5) -> None:
        self._seen.pop(name, None)
        container = self._get(name)
        if container is None:
            if self.door is not None:
                self._remove_relay(name)
            return
        try:
            if container.status in ("running", "restarting", "paused"):
                container.stop(timeout=max(0, int(round(timeout))))  # the runner's last upload goes in this time
            container.remove(force=True)
        except NotFound:
            pass
        finally:
            if self.door is not None:
                self.door.ended(container.labels)  # its pass is dead from now on
                self._remove_relay(name)

    def list_sandboxes(self, install_id: str) -> list[str]:
        # One engine call: the list's own fields name each container (containers.list() would
        # inspect every one of them as well; the delivery loop lists every 2 s).
        found = self.client.api.containers(filters={"label": f"{INSTALL_LABEL}={install_id}", "status": "running"})
        return sorted(n[1:] for c in found for n in c.get("Names") or [] if n.count("/") == 1)

    def logs(self, name: str) -> str:
        container = self._get(name)
        return self._tail(container) if container is not None else ""

    @staticmethod
    def _tail(container, lines: int = 200) -> str:
        try:
            return container.logs(tail=lines).decode("utf-8", "replace")
        except (APIError, NotFound):
            return ""
