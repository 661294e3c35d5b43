"""NANOCLAW_RUNTIME=kubernetes: pods made through lightkube against a fake API server at its HTTP
boundary (tests/fakes/kube_api.py), which runs each pod as a container on the second engine, so
the answers come from a real runner that reaches its session only through the door."""
from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from nanoclaw.lifecycle import background
from nanoclaw.runtime import kubernetes as k8s
from nanoclaw.runtime.base import SandboxSpec
from nanoclaw.runtime.select import select_runtime
from tests.fakes.kube_api import FakeKube
from tests.outbound.test_nudges import OWNER, _script
from tests.remote.flow import HeldTurn, owner_dm
from tests.remote.test_remote_engine_e2e import approve_a_package_and_use_it, package_brain
from tests.tg_flow import message, sandbox_service, texts

K8S_VERSION = "1.33.0"


def spec(tmp_path, name="nanoclaw-home-andy-abc123", **over) -> SandboxSpec:
    base = dict(name=name, session_dir=tmp_path / "s" / "agent", inbound_dir=tmp_path / "s" / "host",
                group_dir=tmp_path / "g", global_dir=None, runner_dir=tmp_path / "r", proxy_dir=tmp_path / "p",
                labels={"nanoclaw.install": "home", "nanoclaw.folder": "andy", "nanoclaw.session": "abc123"})
    return SandboxSpec(**{**base, **over})


def test_the_pod_is_valid_and_locked_down(tmp_path):
    pod = k8s.pod_manifest(spec(tmp_path), image="nanoclaw-agent:latest", namespace="nanoclaw",
                           env={"NANOCLAW_DOOR_URL": "https://door:8443"}, runtime_class="gvisor")
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    s, c = pod["spec"], pod["spec"]["containers"][0]
    assert s["restartPolicy"] == "Never" and s["automountServiceAccountToken"] is False
    assert s["securityContext"]["runAsUser"] == 1000 and s["securityContext"]["runAsNonRoot"] is True
    assert s["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"} and s["runtimeClassName"] == "gvisor"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["resources"]["limits"] == {"cpu": "1.0", "memory": "2048Mi"}
    assert not [v for v in s["volumes"] if set(v) - {"name", "emptyDir"}]  # no hostPath, nothing of the node
    assert pod["metadata"]["labels"]["nanoclaw.install"] == "home"


def test_a_pod_of_an_agent_with_approved_packages_has_a_folder_of_its_own_for_them(tmp_path):
    bare = k8s.pod_manifest(spec(tmp_path), image="i", namespace="n", env={})
    pod = k8s.pod_manifest(spec(tmp_path, packages_dir=tmp_path / "packages"), image="i", namespace="n", env={})
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    mounts = {m["mountPath"]: m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["/workspace/packages"] == "packages" and "/workspace/packages" not in str(bare)
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "packages"]
    assert volume == {"name": "packages", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}  # nothing of the node


def test_an_approved_package_is_importable_in_a_pod(make_settings, sqlite_url, cluster):
    """As on a remote engine: the packages come through the door into the pod's own folder."""
    with sandbox_service(make_settings, sqlite_url, package_brain, runtime="kubernetes", **door(cluster)) as svc:
        answer = approve_a_package_and_use_it(svc)
        assert "tomatoes need sun" in answer and "Permission denied" in answer, answer
        [created] = [b for m, p, b in cluster.requests if m == "POST"]
        assert "/workspace/packages" in str(created["spec"]["containers"][0]["volumeMounts"])


def test_a_pod_asks_no_dns_and_gets_the_doors_name_from_the_host(tmp_path, monkeypatch):
    """Cluster DNS would be a way around the egress allowlist: the pod's resolver points at its own
    loopback, and the door's name comes resolved by the service, in hostAliases."""
    pod = k8s.pod_manifest(spec(tmp_path), image="nanoclaw-agent:latest", namespace="nanoclaw", env={},
                           host_aliases={"10.1.2.3": ["door.example"]})
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert pod["spec"]["dnsPolicy"] == "None" and pod["spec"]["dnsConfig"]["nameservers"] == ["127.0.0.1"]
    assert pod["spec"]["hostAliases"] == [{"ip": "10.1.2.3", "hostnames": ["door.example"]}]
    assert k8s.resolve_door("https://10.0.0.5:8443") == {}
    monkeypatch.setattr(k8s.socket, "getaddrinfo", lambda host, *_a, **_k: [(2, 1, 6, "", ("192.0.2.7", 0))])
    assert k8s.resolve_door("https://door.internal:8443") == {"192.0.2.7": ["door.internal"]}


def test_the_network_policy_lets_sandboxes_reach_the_door_port_only():
    import yaml
    policy = yaml.safe_load((Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "networkpolicy.yaml")
                            .read_text())
    assert policy["spec"]["ingress"] == [] and set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    [rule] = policy["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]  # no port 53: no DNS
    assert all("podSelector" in peer and "namespaceSelector" in peer for peer in rule["to"])


def test_names_become_kubernetes_names():
    assert k8s.pod_name("nanoclaw-home-my_agent-abc") == "nanoclaw-home-my-agent-abc"
    assert k8s.label_value("x" * 80 + "_") == "x" * 63


@pytest.fixture
def cluster(engine_env, monkeypatch, tmp_path):
    from nanoclaw.runtime.docker import from_environment
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.setenv(name, engine_env[name])
    engine = from_environment(30)
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.delenv(name)  # the service itself knows only the cluster
    with FakeKube(engine) as fake:
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps(fake.kubeconfig()))
        monkeypatch.setenv("KUBECONFIG", str(path))
        fake.door_address = engine_env["NANOCLAW_TEST_DOOR_ADDRESS"]
        yield fake
    engine.close()


def door(fake):
    from tests.service_harness import free_port
    return dict(NANOCLAW_DOOR_LISTEN=f"{fake.door_address}:{free_port()}")


def test_a_pod_answers_and_is_found_by_its_labels(make_settings, sqlite_url, cluster):
    with sandbox_service(make_settings, sqlite_url, _script, runtime="kubernetes", **door(cluster)) as svc:
        assert svc.runtime.name == "kubernetes"
        owner_dm(svc)
        svc.post(message(111, OWNER, "hello pod"))
        svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer from the pod")
        assert texts(svc.tg, 111) == ["answer to hello pod"]
        [name] = svc.runtime.list_sandboxes(svc.settings.install_id)
        [created] = [b for m, p, b in cluster.requests if m == "POST"]
        assert created["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        assert any("labelSelector=nanoclaw.install" in p for m, p, _b in cluster.requests if m == "GET")
        svc.runtime.stop(name)
        assert svc.runtime.list_sandboxes(svc.settings.install_id) == []
        assert any(m == "DELETE" and "gracePeriodSeconds=5" in p for m, p, _b in cluster.requests)

        svc.post(message(111, OWNER, "again"))  # a new pod, woken for the next message
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=120, what="the answer from the next pod")


def test_a_pod_reaches_the_door_by_its_name_without_dns(make_settings, sqlite_url, cluster, monkeypatch):
    """NANOCLAW_DOOR_URL names the door by a host name (its certificate's name): the service resolves it
    and the pod, which asks no DNS, reaches the door through hostAliases."""
    from tests.service_harness import free_port
    port = free_port()
    real = k8s.socket.getaddrinfo
    monkeypatch.setattr(k8s.socket, "getaddrinfo", lambda host, *a, **k: [(2, 1, 6, "", (cluster.door_address, 0))]
                        if host == "door.nanoclaw.test" else real(host, *a, **k))
    with sandbox_service(make_settings, sqlite_url, _script, runtime="kubernetes",
                         NANOCLAW_DOOR_LISTEN=f"{cluster.door_address}:{port}",
                         NANOCLAW_DOOR_URL=f"https://door.nanoclaw.test:{port}") as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "hello by name"))
        svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer from the pod")
        [created] = [b for m, p, b in cluster.requests if m == "POST"]
        assert created["spec"]["hostAliases"] == [{"ip": cluster.door_address, "hostnames": ["door.nanoclaw.test"]}]
        assert created["spec"]["dnsPolicy"] == "None"


def test_a_pod_killed_mid_turn_is_replaced_and_the_message_answered_once(make_settings, sqlite_url, cluster,
                                                                         monkeypatch):
    monkeypatch.setattr(background, "SWEEP_INTERVAL_S", 1.0)
    slow = HeldTurn()
    with sandbox_service(make_settings, sqlite_url, slow, runtime="kubernetes", **door(cluster)) as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "slow one"))
        assert slow.held.wait(120), "the model call never came"
        [name] = svc.runtime.list_sandboxes(svc.settings.install_id)
        cluster.engine.containers.get(f"k8s-{k8s.pod_name(name)}").kill()  # the node lost it: the pod fails
        slow.release()
        svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer from the next pod")
        svc.post(message(111, OWNER, "after"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=90, what="the next answer")
        assert texts(svc.tg, 111) == ["answer to slow one", "answer to after"]
        assert len([m for m, p, _b in cluster.requests if m == "POST"]) == 2  # the failed pod was replaced


def test_an_orphan_pod_of_this_install_is_found_and_stopped(make_settings, cluster, tmp_path):
    settings = make_settings(NANOCLAW_RUNTIME="kubernetes", NANOCLAW_INSTALL_ID="orphans", **door(cluster))
    runtime = select_runtime(settings, lambda _l: None)
    pod = k8s.pod_manifest(spec(tmp_path, name="nanoclaw-orphans-andy-old", command=("sleep", "120"), labels={
        "nanoclaw.install": "orphans", "nanoclaw.folder": "andy", "nanoclaw.session": "old"}),
        image="nanoclaw-agent:latest", namespace="nanoclaw", env={})  # running (a pod that cannot start is not one)
    cluster.create(pod)
    other = k8s.pod_manifest(spec(tmp_path, name="nanoclaw-else-andy-x", labels={
        "nanoclaw.install": "else", "nanoclaw.folder": "andy", "nanoclaw.session": "x"}),
        image="busybox-none", namespace="nanoclaw", env={})
    cluster.create(other)
    assert runtime.list_sandboxes("orphans") == ["nanoclaw-orphans-andy-old"]
    runtime.stop("nanoclaw-orphans-andy-old", timeout=0)
    assert runtime.list_sandboxes("orphans") == [] and "nanoclaw-else-andy-x" in cluster.pods


def test_a_missing_image_or_a_missing_verb_is_a_failed_start_that_says_why(make_settings, cluster, tmp_path):
    settings = make_settings(NANOCLAW_RUNTIME="kubernetes", NANOCLAW_INSTALL_ID="fails",
                             NANOCLAW_AGENT_IMAGE="nanoclaw-agent:not-built", **door(cluster))
    runtime = select_runtime(settings, lambda _l: None)
    sandbox = spec(tmp_path, name="nanoclaw-fails-andy-s1", labels={
        "nanoclaw.install": "fails", "nanoclaw.folder": "andy", "nanoclaw.session": "s1"})
    (settings.sessions_dir / "andy" / "s1").mkdir(parents=True)
    with pytest.raises(RuntimeError, match="ErrImagePull"):
        runtime.start(sandbox)
    # as the service goes on: no stop in between. The failed start left no pod to be taken for the sandbox:
    assert not runtime.is_running(sandbox.name) and runtime.list_sandboxes("fails") == []
    with pytest.raises(RuntimeError, match="ErrImagePull"):  # ...so the next start tries for real, and says why
        runtime.start(sandbox)
    assert len([m for m, _p, _b in cluster.requests if m == "POST"]) == 2
    cluster.verbs.discard("create")
    with pytest.raises(RuntimeError, match="403"):
        runtime.start(sandbox)
    cluster.verbs.discard("list")
    ok, detail = k8s.check_access(runtime.client, "nanoclaw")
    assert not ok and "deploy/kubernetes/rbac.yaml" in detail


@pytest.mark.parametrize("pending, says", [("unschedulable", "Unschedulable"), ("slow-pull", "ContainerCreating")])
def test_a_pod_that_stays_pending_is_a_failed_start_with_its_reason(make_settings, cluster, tmp_path, pending, says):
    settings = make_settings(NANOCLAW_RUNTIME="kubernetes", NANOCLAW_INSTALL_ID="pend", **door(cluster))
    runtime = select_runtime(settings, lambda _l: None)
    runtime.start_wait_s = 2.0
    cluster.pending = pending
    sandbox = spec(tmp_path, name="nanoclaw-pend-andy-s1", labels={
        "nanoclaw.install": "pend", "nanoclaw.folder": "andy", "nanoclaw.session": "s1"})
    (settings.sessions_dir / "andy" / "s1").mkdir(parents=True)
    with pytest.raises(RuntimeError, match=f"did not run within 2 s.*{says}"):
        runtime.start(sandbox)
    assert not runtime.is_running(sandbox.name) and runtime.list_sandboxes("pend") == []  # and no pod left


def test_a_pending_pod_whose_container_waits_with_a_failure_is_not_live():
    from lightkube.resources.core_v1 import Pod
    failing = Pod.from_dict({"metadata": {"name": "x"}, "status": {"phase": "Pending", "containerStatuses": [{
        "name": "agent", "ready": False, "restartCount": 0, "image": "i", "imageID": "",
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}})
    pulling = Pod.from_dict({"metadata": {"name": "x"}, "status": {"phase": "Pending", "containerStatuses": [{
        "name": "agent", "ready": False, "restartCount": 0, "image": "i", "imageID": "",
        "state": {"waiting": {"reason": "ContainerCreating"}}}]}})
    assert not k8s.live(failing) and k8s.live(pulling)


def test_two_starts_racing_for_one_session_make_one_pod(make_settings, cluster, tmp_path, monkeypatch):
    settings = make_settings(NANOCLAW_RUNTIME="kubernetes", NANOCLAW_INSTALL_ID="race", **door(cluster))
    runtime = select_runtime(settings, lambda _l: None)
    sandbox = spec(tmp_path, name="nanoclaw-race-andy-s1", labels={
        "nanoclaw.install": "race", "nanoclaw.folder": "andy", "nanoclaw.session": "s1"})
    (settings.sessions_dir / "andy" / "s1").mkdir(parents=True)
    runtime.start(sandbox)
    real_get = runtime._get
    seen = []
    monkeypatch.setattr(runtime, "_get", lambda name: None if not seen.append(name) and len(seen) == 1
                        else real_get(name))  # the other process looked before this one created it
    runtime.start(sandbox)  # 409 AlreadyExists, and the pod runs: that one is the sandbox
    assert [m for m, p, _b in cluster.requests if m == "POST"] == ["POST", "POST"]
    assert runtime.list_sandboxes("race") == [sandbox.name]
    runtime.stop(sandbox.name, timeout=0)


def test_deploy_manifests_are_valid(tmp_path):
    import yaml
    folder = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
    docs = [d for f in sorted(folder.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "StatefulSet", "Service", "Role", "RoleBinding", "ServiceAccount", "NetworkPolicy"} <= kinds
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    [role] = [d for d in docs if d["kind"] == "Role"]
    [rule] = role["rules"]
    assert rule["resources"] == ["pods", "pods/log"] and set(rule["verbs"]) == {"create", "get", "list", "watch",
                                                                                 "delete"}
