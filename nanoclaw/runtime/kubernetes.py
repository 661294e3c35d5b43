"""Kubernetes runtime: one pod per session, through lightkube, its session over the network.

Why lightkube: typed models of every API object (the fake API server in the tests checks each
request against the very models the client builds), a plain synchronous client that fits Flask
and the sandbox manager's threads, and a small footprint (the official `kubernetes` client is ten
times the size and generates its models at a different pace; kr8s is async first).

The pod is today's sandbox in Kubernetes terms: restartPolicy Never; uid/gid 1000, runAsNonRoot,
a read-only root filesystem, every capability dropped, no privilege escalation, seccomp
RuntimeDefault; no service-account token; CPU and memory limits (the pid limit is the kubelet's
`podPidsLimit`: the Pod API has no per-pod field); an optional runtimeClassName (gVisor, Kata).
Its folders are memory-backed emptyDirs that the runner fills from the door (remote.py in the
runner); the door's address, CA and the pass come in its environment. The namespace's
NetworkPolicy (deploy/kubernetes/) lets these pods reach the door and nothing else, the cluster's
DNS included (a name lookup is a way out too: a sandbox could spell data into the names it asks
for). So a pod asks no DNS server at all (dnsPolicy None, a nameserver on its own loopback, where
nothing answers): this service resolves the door's host name itself and gives the pod the answer in
`hostAliases`, so the certificate's name still matches.
"""
from __future__ import annotations

import ipaddress
import logging
import re
import socket
import time
from urllib.parse import urlsplit

from .base import (GLOBAL_TARGET, GROUP_TARGET, INBOUND_TARGET, INSTALL_LABEL, PACKAGES_TARGET, SESSION_TARGET, NameLocks,
                   SandboxSpec, check_spec, prepare_session, sandbox_env)

log = logging.getLogger("nanoclaw.runtime.kubernetes")

SANDBOX_ANNOTATION = "nanoclaw.sandbox"
COMPONENT = {"app.kubernetes.io/name": "nanoclaw", "app.kubernetes.io/component": "sandbox"}
START_WAIT_S = 180.0
STOP_WAIT_PAD_S = 15.0
FAILED_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                  "CreateContainerError", "RunContainerError")
# emptyDirs, in memory (they count against the pod's memory limit, as Docker's tmpfs does)
VOLUMES = (("tmp", "/tmp", "512Mi"), ("var-tmp", "/var/tmp", "64Mi"), ("session", SESSION_TARGET, "1Gi"),
           ("inbound", INBOUND_TARGET, "512Mi"), ("group", GROUP_TARGET, "1Gi"), ("global", GLOBAL_TARGET, "256Mi"))


def pod_name(name: str) -> str:
    """A sandbox name as a pod name (DNS-1123: lower-case letters, digits, '-', '.')."""
    return re.sub(r"[^a-z0-9.-]", "-", name.lower())[:253].strip("-.") or "sandbox"


def label_value(value: str) -> str:
    """Label values: at most 63 of letters, digits, '-', '_', '.', starting and ending alphanumeric."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", value)[:63].strip("-_.")


NO_DNS = {"nameservers": ["127.0.0.1"], "searches": [], "options": [{"name": "ndots", "value": "0"}]}


def resolve_door(door_url: str) -> dict[str, list[str]]:
    """{address: [the door URL's host name]} for a pod's hostAliases, resolved here, on the control
    plane; {} when the URL names an address already."""
    host = urlsplit(door_url).hostname or ""
    try:
        ipaddress.ip_address(host)
        return {}
    except ValueError:
        pass
    infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return {str(infos[0][4][0]): [host]}


def pod_manifest(spec: SandboxSpec, *, image: str, namespace: str, env: dict[str, str],
                 runtime_class: str | None = None, host_aliases: dict[str, list[str]] | None = None) -> dict:
    """The pod for a sandbox (pure; the tests check it against the Kubernetes schema)."""
    labels = {**COMPONENT, **{k: label_value(v) for k, v in spec.labels.items()}}
    annotations = {**{k: v for k, v in spec.labels.items()}, SANDBOX_ANNOTATION: spec.name}
    memory = f"{spec.memory_mb}Mi"
    # the agent's approved packages: the runner fetches them from the door into their own folder
    volumes = VOLUMES + ((("packages", PACKAGES_TARGET, "1Gi"),) if spec.packages_dir is not None else ())
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "dnsPolicy": "None",
        "dnsConfig": NO_DNS,
        "securityContext": {"runAsUser": spec.uid, "runAsGroup": spec.gid, "runAsNonRoot": True,
                            "fsGroup": spec.gid, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "agent",
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": list(spec.command),
            "workingDir": GROUP_TARGET,
            "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
            "resources": {"limits": {"cpu": str(spec.cpus), "memory": memory},
                          "requests": {"cpu": str(min(spec.cpus, 0.25)), "memory": memory}},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "runAsNonRoot": True, "privileged": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": n, "mountPath": path} for n, path, _size in volumes],
        }],
        "volumes": [{"name": n, "emptyDir": {"medium": "Memory", "sizeLimit": size}} for n, _path, size in volumes],
    }
    if runtime_class:
        pod_spec["runtimeClassName"] = runtime_class
    if host_aliases:
        pod_spec["hostAliases"] = [{"ip": ip, "hostnames": names} for ip, names in sorted(host_aliases.items())]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name(spec.name), "namespace": namespace, "labels": labels,
                         "annotations": annotations},
            "spec": pod_spec}


def live(pod) -> bool:
    """A pod that counts as the sandbox running: Pending or Running, not being deleted, and not a
    Pending pod whose container waits with a failure (it will never run: a failed start)."""
    return pod.status is not None and pod.status.phase in ("Pending", "Running") \
        and pod.metadata.deletionTimestamp is None and start_failure(pod) is None


def pending_reason(pod) -> str:
    """Why a pod is still Pending, as Kubernetes says it (pure): not scheduled, or its container waiting."""
    status = pod.status if pod is not None else None
    if status is None:
        return "it was never seen by the cluster"
    for c in status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False":
            return f"not scheduled: {c.reason or ''} {(c.message or '')[:200]}".strip()
    for c in status.containerStatuses or []:
        waiting = c.state and c.state.waiting
        if waiting and waiting.reason:
            return f"its container waits: {waiting.reason} {(waiting.message or '')[:200]}".strip()
    return f"it stays {status.phase or 'Pending'}"


def start_failure(pod) -> str | None:
    """Why a pod will not run (pure), or None while it may still."""
    status = pod.status
    if status is None:
        return None
    if status.phase in ("Failed", "Succeeded"):
        return f"the pod ended at once ({status.phase}: {status.reason or status.message or 'no reason given'})"
    for c in status.containerStatuses or []:
        waiting = c.state and c.state.waiting
        if waiting and waiting.reason in FAILED_WAITING:
            return f"the pod cannot start its container: {waiting.reason} ({(waiting.message or '')[:200]})"
    return None


class KubernetesRuntime:
    name = "kubernetes"

    def __init__(self, client, *, namespace: str, image: str, door, secrets=(), runtime_class: str | None = None,
                 start_wait_s: float = START_WAIT_S):
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod
        self._Pod, self._ApiError = Pod, ApiError
        self.client, self.namespace, self.image = client, namespace, image
        self.door, self.secrets, self.runtime_class = door, list(secrets), runtime_class
        self.start_wait_s = start_wait_s
        self._locks = NameLocks()

    def _get(self, name: str):
        try:
            return self.client.get(self._Pod, pod_name(name), namespace=self.namespace)
        except self._ApiError as exc:
            if exc.status.code == 404:
                return None
            raise

    def start(self, spec: SandboxSpec) -> None:
        check_spec(spec, self.secrets)
        if spec.extra_mounts:
            raise RuntimeError("extra mounts are folders of this machine, which a pod cannot have; remove them from "
                               "the agent group")
        with self._locks(spec.name):
            existing = self._get(spec.name)
            if existing is not None:
                if live(existing):
                    return
                log.warning("sandbox %s had ended (%s); making room", spec.name, existing.status.phase)
                self._delete_and_wait(spec.name, 0)
            prepare_session(spec)
            env = {**sandbox_env(spec), **self.door.env_for(spec)}
            try:
                aliases = resolve_door(env["NANOCLAW_DOOR_URL"])
            except OSError as exc:
                raise RuntimeError(f"the door's host in NANOCLAW_DOOR_URL does not resolve here ({exc}); pods get "
                                   "no DNS, so this service resolves it for them") from None
            manifest = pod_manifest(spec, image=spec.image or self.image, namespace=self.namespace, env=env,
                                    runtime_class=self.runtime_class, host_aliases=aliases)
            try:
                self.client.create(self._Pod.from_dict(manifest), namespace=self.namespace)
            except self._ApiError as exc:
                if exc.status.code == 409 and self.is_running(spec.name):
                    return  # another process made it: that one is the sandbox
                raise RuntimeError(f"Kubernetes refused the pod: {exc.status.code} {exc.status.reason} "
                                   f"({(exc.status.message or '')[:300]})") from None
            try:
                self._wait_running(spec.name)
            except BaseException:
                # a failed start leaves no pod behind: the next start makes a new one (a pod left Pending
                # would be taken for the sandbox, with no runner in it)
                try:
                    self._delete_and_wait(spec.name, 0)
                except Exception as exc:  # noqa: BLE001 - the start failed anyway; the orphan sweep finds it
                    log.warning("could not remove the pod of the failed start of %s: %s", spec.name, exc)
                raise

    def _wait_running(self, name: str) -> None:
        """Until the pod runs; a pod that cannot (no image, bad config, ended), or still Pending after
        start_wait_s (unschedulable, a pull that does not end), is a failed start that says why."""
        deadline = time.monotonic() + self.start_wait_s
        last = None
        for _event, pod in self.client.watch(self._Pod, namespace=self.namespace,
                                             fields={"metadata.name": pod_name(name)},
                                             server_timeout=max(1, int(self.start_wait_s))):
            last = pod
            if pod.status is not None and pod.status.phase == "Running":
                return
            why = start_failure(pod)
            if why:
                raise RuntimeError(why)
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"the pod did not run within {self.start_wait_s:.0f} s ({pending_reason(last)})")

    def is_running(self, name: str) -> bool:
        pod = self._get(name)
        return pod is not None and live(pod)

    def stop(self, name: str, timeout: float = 5) -> None:
        pod = self._get(name)
        if pod is None:
            return
        try:
            self._delete_and_wait(name, max(0, int(round(timeout))))  # the runner's last upload goes in this time
        finally:
            self.door.ended(pod.metadata.annotations or {})

    def _delete_and_wait(self, name: str, grace: int) -> None:
        try:
            self.client.delete(self._Pod, pod_name(name), namespace=self.namespace, grace_period=grace)
        except self._ApiError as exc:
            if exc.status.code != 404:
                raise
            return
        deadline = time.monotonic() + grace + STOP_WAIT_PAD_S
        while time.monotonic() < deadline and self._get(name) is not None:
            time.sleep(0.2)

    def list_sandboxes(self, install_id: str) -> list[str]:
        pods = self.client.list(self._Pod, namespace=self.namespace, labels={INSTALL_LABEL: label_value(install_id)})
        return sorted((p.metadata.annotations or {}).get(SANDBOX_ANNOTATION, p.metadata.name) for p in pods if live(p))

    def logs(self, name: str) -> str:
        try:
            return "".join(self.client.log(pod_name(name), namespace=self.namespace, tail_lines=200))
        except self._ApiError:
            return ""


def connect(namespace: str):
    """A lightkube client from KUBECONFIG (or ~/.kube/config) or the pod's service account."""
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig
    return Client(KubeConfig.from_env(), namespace=namespace, timeout=30, trust_env=False)


def check_access(client, namespace: str) -> tuple[bool, str]:
    """Can this service manage sandboxes there: list pods answers (doctor)."""
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Pod
    try:
        next(iter(client.list(Pod, namespace=namespace, chunk_size=1)), None)
    except ApiError as exc:
        if exc.status.code in (401, 403):
            return False, (f"the cluster refused to list pods in namespace {namespace} ({exc.status.code}); apply "
                           "deploy/kubernetes/rbac.yaml (a Role for pods there) and bind it to the service's account")
        return False, f"the cluster answered {exc.status.code} {exc.status.reason}"
    except Exception as exc:  # noqa: BLE001 - a doctor line, never a traceback
        return False, f"the cluster did not answer ({type(exc).__name__}); check KUBECONFIG or the in-cluster account"
    return True, f"may manage pods in namespace {namespace}"
