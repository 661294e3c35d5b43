"""A Kubernetes API server for pods, faked at its HTTP boundary, that runs each pod as a container
on a real Docker engine (the second engine of scripts/remote-engine.sh: another machine's view).

It follows the documented core/v1 Pod API as far as NanoClaw uses it: create (201; 409 AlreadyExists
for a taken name), get (404 NotFound), list and watch by label and field selector (watch streams
newline-delimited events, ADDED for what exists, then MODIFIED/DELETED), delete with a grace period
(deletionTimestamp, SIGTERM, then gone), log with tailLines; phases Pending → Running →
Succeeded/Failed, and a waiting reason (ErrImagePull) for an image the engine lacks. Every request
needs the bearer token; a verb the "Role" does not grant is 403 Forbidden. Each pod sent is checked
against the client library's own model: it must parse, and come back unchanged (an unknown field
would not).
"""
from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from lightkube.resources.core_v1 import Pod

VERBS = frozenset({"create", "get", "list", "watch", "delete", "log"})
TOKEN = "fake-cluster-token-0123456789"


def now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def matches(pod: dict, labels: dict, fields: dict) -> bool:
    have = pod["metadata"].get("labels") or {}
    if any(have.get(k) != v for k, v in labels.items()):
        return False
    return all({"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
                "status.phase": pod["status"].get("phase")}.get(k) == v for k, v in fields.items())


def selector(raw: str | None) -> dict:
    if not raw:
        return {}
    return dict(part.split("=", 1) for part in raw.replace("==", "=").split(",") if "=" in part)


class FakeKube:
    def __init__(self, engine, *, namespace: str = "nanoclaw", network_mode: str = "host"):
        self.engine, self.namespace, self.network_mode = engine, namespace, network_mode
        self.verbs = set(VERBS)
        self.pending = None  # "unschedulable" or "slow-pull": new pods stay Pending (a busy cluster, a huge image)
        self.pods: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []
        self._version = 0
        self._lock = threading.RLock()
        self._watchers: list[tuple[queue.Queue, dict, dict]] = []
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle -----------------------------------------------------------------------------------
    def __enter__(self) -> "FakeKube":
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="fake-kube", daemon=True).start()
        threading.Thread(target=self._follow, name="fake-kubelet", daemon=True).start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()
        for name in list(self.pods):
            self._remove_container(name, 0)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def kubeconfig(self) -> dict:
        return {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
                "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                "users": [{"name": "nanoclaw", "user": {"token": TOKEN}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "nanoclaw",
                                                          "namespace": self.namespace}}]}

    # -- state ---------------------------------------------------------------------------------------
    def _bump(self, pod: dict, kind: str) -> None:
        self._version += 1
        pod["metadata"]["resourceVersion"] = str(self._version)
        for q, labels, fields in list(self._watchers):
            if matches(pod, labels, fields):
                q.put({"type": kind, "object": json.loads(json.dumps(pod))})

    def _container(self, name: str):
        from docker.errors import NotFound
        try:
            return self.engine.containers.get(f"k8s-{name}")
        except NotFound:
            return None

    def create(self, body: dict) -> tuple[int, dict]:
        try:
            parsed = Pod.from_dict(body)
        except Exception as exc:  # noqa: BLE001 - the answer says why
            return 422, status(422, "Invalid", f"not a Pod: {exc}")
        if parsed.to_dict() != body:
            return 422, status(422, "Invalid", "the pod has fields the Pod model does not know")
        name = body["metadata"]["name"]
        with self._lock:
            if name in self.pods:
                return 409, status(409, "AlreadyExists", f'pods "{name}" already exists')
            pod = json.loads(json.dumps(body))
            pod["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now_iso(), namespace=self.namespace)
            pod["status"] = {"phase": "Pending"}
            self.pods[name] = pod
            self._bump(pod, "ADDED")
        threading.Thread(target=self._run, args=(name,), daemon=True).start()
        return 201, pod

    def _run(self, name: str) -> None:
        """The kubelet's part: the pod's container on the engine, as the pod spec says."""
        from docker.errors import APIError, ImageNotFound
        pod = self.pods[name]
        if self.pending == "unschedulable":
            with self._lock:
                pod["status"] = {"phase": "Pending", "conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient memory."}]}
                self._bump(pod, "MODIFIED")
            return
        if self.pending == "slow-pull":
            self._container_state(name, "Pending", {"waiting": {"reason": "ContainerCreating"}})
            return
        spec, container = pod["spec"], pod["spec"]["containers"][0]
        ctx, csc = spec.get("securityContext") or {}, container.get("securityContext") or {}
        limits = container["resources"]["limits"]
        tmpfs = {}
        sizes = {v["name"]: v["emptyDir"].get("sizeLimit", "64Mi") for v in spec["volumes"]}
        for mount in container["volumeMounts"]:
            size = sizes[mount["name"]].replace("Mi", "m").replace("Gi", "g")
            tmpfs[mount["mountPath"]] = f"rw,nosuid,nodev,size={size},uid={ctx['runAsUser']},gid={ctx['fsGroup']},mode=0770"
        try:
            self.engine.images.get(container["image"])
        except ImageNotFound:
            self._container_state(name, "Pending", {"waiting": {"reason": "ErrImagePull", "message": "image not found"}})
            return
        # the kubelet writes hostAliases into the pod's /etc/hosts and dnsConfig into its resolv.conf
        extra_hosts = {n: a["ip"] for a in spec.get("hostAliases") or [] for n in a["hostnames"]}
        dns = (spec.get("dnsConfig") or {}).get("nameservers") if spec.get("dnsPolicy") == "None" else None
        try:
            self.engine.containers.run(
                container["image"], command=container["command"], name=f"k8s-{name}", detach=True, init=True,
                extra_hosts=extra_hosts or None, dns=dns if self.network_mode != "host" else None,
                user=f"{ctx['runAsUser']}:{ctx['runAsGroup']}", environment={e["name"]: e["value"] for e in container["env"]},
                working_dir=container["workingDir"], network_mode=self.network_mode,
                mem_limit=limits["memory"].replace("Mi", "m"), nano_cpus=int(float(limits["cpu"]) * 1e9),
                read_only=bool(csc.get("readOnlyRootFilesystem")), tmpfs=tmpfs,
                cap_drop=csc.get("capabilities", {}).get("drop"), security_opt=["no-new-privileges"],
                labels={"fake-kube": "1"})
        except APIError as exc:  # e.g. the pod was deleted while its container started ("marked for removal")
            self._container_state(name, "Failed", {"terminated": {"exitCode": 128, "reason": "StartError",
                                                                  "message": str(exc)[:200]}}, unless_deleted=True)
            return  # as a kubelet does: the error is in the pod's status, never in a thread of the API server
        self._container_state(name, "Running", {"running": {"startedAt": now_iso()}}, unless_deleted=True,
                              ready=True, startTime=now_iso())

    def _container_state(self, name: str, phase: str, state: dict, *, unless_deleted: bool = False,
                         ready: bool = False, **status) -> None:
        """The pod's phase and its one container's state, told to the watchers (not to a pod that was
        deleted meanwhile, where `unless_deleted`)."""
        with self._lock:
            pod = self.pods.get(name)
            if pod is None or (unless_deleted and pod["metadata"].get("deletionTimestamp") is not None):
                return
            pod["status"] = {"phase": phase, **status, "containerStatuses": [{
                "name": "agent", "ready": ready, "restartCount": 0, "image": pod["spec"]["containers"][0]["image"],
                "imageID": "", "state": state}]}
            self._bump(pod, "MODIFIED")

    def _follow(self) -> None:
        """Phases from the containers: an exited container ends its pod (Succeeded on 0, else Failed)."""
        while not self._stop.wait(0.3):
            with self._lock:
                running = [n for n, p in self.pods.items() if p["status"].get("phase") == "Running"
                           and p["metadata"].get("deletionTimestamp") is None]
            for name in running:
                c = self._container(name)
                if c is None or c.status != "exited":
                    continue
                code = c.attrs["State"]["ExitCode"]
                with self._lock:
                    pod = self.pods.get(name)
                    if pod is not None and pod["status"].get("phase") == "Running":
                        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
                        pod["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": code,
                                                                                         "reason": "Error" if code else "Completed"}}
                        self._bump(pod, "MODIFIED")

    def delete(self, name: str, grace: int) -> tuple[int, dict]:
        with self._lock:
            pod = self.pods.get(name)
            if pod is None:
                return 404, status(404, "NotFound", f'pods "{name}" not found')
            if pod["metadata"].get("deletionTimestamp") is None:
                pod["metadata"]["deletionTimestamp"] = now_iso()
                pod["metadata"]["deletionGracePeriodSeconds"] = grace
                self._bump(pod, "MODIFIED")
                threading.Thread(target=self._finish_delete, args=(name, grace), daemon=True).start()
            return 200, pod

    def _finish_delete(self, name: str, grace: int) -> None:
        self._remove_container(name, grace)
        with self._lock:
            pod = self.pods.pop(name, None)
            if pod is not None:
                self._bump(pod, "DELETED")

    def _remove_container(self, name: str, grace: int) -> None:
        c = self._container(name)
        if c is not None:
            if c.status == "running":
                c.stop(timeout=grace)
            c.remove(force=True)

    def logs(self, name: str, tail: int | None) -> str | None:
        c = self._container(name)
        return None if c is None else c.logs(tail=tail or "all").decode("utf-8", "replace")

    def watch(self, labels: dict, fields: dict, timeout: float, write) -> None:
        q: queue.Queue = queue.Queue()
        with self._lock:
            for pod in self.pods.values():
                if matches(pod, labels, fields):
                    q.put({"type": "ADDED", "object": json.loads(json.dumps(pod))})
            entry = (q, labels, fields)
            self._watchers.append(entry)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and not self._stop.is_set():
                try:
                    event = q.get(timeout=0.2)
                except queue.Empty:
                    continue
                write(json.dumps(event).encode() + b"\n")
        finally:
            with self._lock:
                self._watchers.remove(entry)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeKube

    def log_message(self, *_args) -> None:
        pass

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size)) if size else None
        self.fake.requests.append((method, self.path, body))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._json(401, status(401, "Unauthorized", "Unauthorized"))
        prefix = f"/api/v1/namespaces/{self.fake.namespace}/pods"
        if not parts.path.startswith(prefix):
            return self._json(404, status(404, "NotFound", f"no route {parts.path}"))
        rest = parts.path[len(prefix):].strip("/").split("/") if parts.path != prefix else []
        watch = query.get("watch") in ("true", "1")
        verb = {("POST", 0): "create", ("GET", 0): "watch" if watch else "list", ("GET", 1): "get",
                ("DELETE", 1): "delete", ("GET", 2): "log"}.get((method, len(rest)))
        if verb is None:
            return self._json(405, status(405, "MethodNotAllowed", "not here"))
        if verb not in self.fake.verbs:
            return self._json(403, status(403, "Forbidden", f'pods is forbidden: cannot {verb} resource "pods" in '
                                                            f'API group "" in the namespace "{self.fake.namespace}"'))
        if verb == "create":
            return self._json(*self.fake.create(body))
        if verb == "get":
            pod = self.fake.pods.get(rest[0])
            return self._json(200, pod) if pod else self._json(404, status(404, "NotFound", f'pods "{rest[0]}" not found'))
        if verb == "delete":
            grace = int(query.get("gracePeriodSeconds") or (body or {}).get("gracePeriodSeconds") or 30)
            return self._json(*self.fake.delete(rest[0], grace))
        if verb == "log":
            text = self.fake.logs(rest[0], int(query["tailLines"]) if "tailLines" in query else None)
            if text is None:
                return self._json(404, status(404, "NotFound", "no such pod"))
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return None
        labels, fields = selector(query.get("labelSelector")), selector(query.get("fieldSelector"))
        if verb == "list":
            with self.fake._lock:
                items = [p for p in self.fake.pods.values() if matches(p, labels, fields)]
                version = str(self.fake._version)
            return self._json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": version},
                                    "items": items})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")  # said, so a client never reuses the connection the watch ends
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        try:
            self.fake.watch(labels, fields, float(query.get("timeoutSeconds") or 60), write)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
        return None

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_DELETE(self) -> None:
        self._route("DELETE")
