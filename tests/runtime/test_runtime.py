"""Sandboxes, for real: Docker and bubblewrap run a small Python program that reports what it
can see and do; the tests check what a user would care about (no network, no secrets, no
host files, limits, one sandbox per name)."""
from __future__ import annotations

import json
import os
import subprocess
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from nanoclaw.config import PROJECT_ROOT
from nanoclaw.runtime import bwrap as bwrap_rt
from nanoclaw.runtime import docker as docker_rt
from nanoclaw.runtime import limits
from nanoclaw.runtime.base import (INSTALL_LABEL, Mount, RuntimeUnavailable, SandboxSpec, SecretInSandbox,
                                   assert_no_secrets, check_spec, extra_target)
from nanoclaw.runtime.select import select_runtime
from nanoclaw.runtime.image import image_exists, mirror_from_sources
from tests.conftest import require

from agent_runner.bridge import _pump  # noqa: E402 - container/ is on sys.path (tests/conftest.py)

RUNNER_DIR = PROJECT_ROOT / "container" / "agent_runner"
HOST_SECRET = "sk-ant-host-secret-" + uuid.uuid4().hex
SENTINEL = "SENTINEL-" + uuid.uuid4().hex


def sdk_pin() -> str:
    for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines():
        if line.lower().startswith("claude-agent-sdk=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError("claude-agent-sdk is not pinned in requirements.txt")


# --- runtimes ------------------------------------------------------------------------------

_docker: list = []


def docker_client():
    if not _docker:
        _docker.append(docker_rt.connect()[0])
    return _docker[0]


def make_docker_runtime() -> docker_rt.DockerRuntime:
    client = docker_client()
    require(client is not None, "no Docker engine answers (scripts/docker-engine.sh start)")
    image = os.environ.get("NANOCLAW_AGENT_IMAGE", "nanoclaw-agent:latest")
    require(_has(client, image), f"image {image} is missing (flask --app app nanoclaw image build)")
    return docker_rt.DockerRuntime(client, image=image, secrets=[HOST_SECRET])


def stopping_what_it_starts(rt):
    """Yield the runtime; afterwards stop every sandbox a test started through it."""
    started: list[str] = []
    original = rt.start
    rt.start = lambda spec: (started.append(spec.name), original(spec))[1]
    yield rt
    for name in set(started):
        rt.stop(name, timeout=1)


@pytest.fixture(params=["docker", "bwrap"])
def runtime(request, tmp_path):
    if request.param == "docker":
        rt = make_docker_runtime()
    else:
        problem = bwrap_rt.probe()
        require(problem is None, f"bubblewrap does not work here: {problem}")
        rt = bwrap_rt.BwrapRuntime(tmp_path / "data" / "run" / "bwrap", secrets=[HOST_SECRET])
    yield from stopping_what_it_starts(rt)


def _has(client, image: str) -> bool:
    try:
        client.images.get(image)
        return True
    except Exception:
        return False


@pytest.fixture
def layout(tmp_path):
    """A project-like tree: .env and a central DB holding secrets, two sessions, groups, proxy dir."""
    project = tmp_path / "project"
    data = project / "data"
    session = data / "sessions" / "andy" / "sess-1" / "agent"
    inbound = data / "sessions" / "andy" / "sess-1" / "host"
    other = data / "sessions" / "andy" / "sess-2" / "host"
    for d in (session, inbound, other, project / "groups" / "andy", project / "groups" / "global",
              data / "proxy" / "andy"):
        d.mkdir(parents=True)
    (project / ".env").write_text(f"ANTHROPIC_API_KEY={SENTINEL}\n")
    (data / "nanoclaw.db").write_text(SENTINEL)
    (other / "inbound.db").write_text(SENTINEL)
    (project / "groups" / "global" / "CLAUDE.md").write_text("shared notes")
    (data / "proxy" / "andy" / "probe.txt").write_text("through the proxy dir")
    return {"project": project, "data": data, "session": session, "inbound": inbound, "other": other,
            "group": project / "groups" / "andy", "global": project / "groups" / "global",
            "proxy": data / "proxy" / "andy"}


def make_spec(layout, program: str, *, install: str | None = None, env=None, **kw) -> SandboxSpec:
    install = install or "t" + uuid.uuid4().hex[:10]
    return SandboxSpec(
        name=f"nanoclaw-{install}-andy-{uuid.uuid4().hex[:8]}",
        session_dir=layout["session"], inbound_dir=layout["inbound"], group_dir=layout["group"],
        global_dir=layout["global"],
        runner_dir=RUNNER_DIR, proxy_dir=layout["proxy"],
        env={"TZ": "UTC", **(env or {})}, command=("python3", "-c", program),
        labels={INSTALL_LABEL: install, "nanoclaw.folder": "andy"}, **kw)


def wait_for(predicate, timeout: float = 30, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --- what the sandbox sees -------------------------------------------------------------

PROBE = r'''
import json, os, socket, importlib.metadata
r = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "home": os.environ.get("HOME"),
     "env": dict(os.environ)}
def attempt(fn):
    try:
        return ["ok", fn()]
    except Exception as e:
        return ["error", type(e).__name__ + ": " + str(e)]
def tcp():
    s = socket.create_connection(("127.0.0.1", int(os.environ["PROBE_PORT"])), timeout=3)
    s.close()
def write(path):
    with open(path, "w") as f:
        f.write("x")
r["tcp_host"] = attempt(tcp)
r["dns"] = attempt(lambda: socket.getaddrinfo("pypi.org", 443))
r["write_global"] = attempt(lambda: write("/workspace/global/new.txt"))
r["write_group"] = attempt(lambda: write("/workspace/group/from-sandbox.txt"))
r["write_home"] = attempt(lambda: write(os.path.join(os.environ["HOME"], "x.txt")))
r["read_global"] = attempt(lambda: open("/workspace/global/CLAUDE.md").read())
r["read_proxy"] = attempt(lambda: open("/run/nanoclaw-proxy/probe.txt").read())
def door():
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect("/run/nanoclaw-proxy/proxy.sock")
    return s.recv(100).decode()
r["proxy_socket"] = attempt(door)
r["read_forbidden"] = {p: attempt(lambda p=p: open(p).read()) for p in json.loads(os.environ["PROBE_FORBIDDEN"])}
r["interfaces"] = [name for _, name in socket.if_nameindex()]
r["sdk"] = attempt(lambda: importlib.metadata.version("claude-agent-sdk"))
def cli():
    import pathlib, subprocess, claude_agent_sdk
    exe = pathlib.Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip() or out.stderr.strip()
r["cli"] = attempt(cli)
# Any file anywhere in the sandbox with a name the host's secrets live under?
found = []
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    found += [os.path.join(top, f) for f in files if f in (".env", "nanoclaw.db", "inbound.db")]
r["secret_named_files"] = found
tmp = "/workspace/session/report.tmp"
with open(tmp, "w") as f:
    json.dump(r, f)
os.rename(tmp, "/workspace/session/report.json")
'''


def test_sandbox_isolation(runtime, layout, monkeypatch):
    # Secrets in the host's environment must not follow the agent into the sandbox.
    monkeypatch.setenv("ANTHROPIC_API_KEY", HOST_SECRET)
    monkeypatch.setenv("NANOCLAW_TEST_HOST_ONLY", HOST_SECRET)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)
    # The proxy's socket (mode 0666, as the proxy makes it) is the sandbox's one door out.
    door = socket.socket(socket.AF_UNIX)
    door.bind(str(layout["proxy"] / "proxy.sock"))
    os.chmod(layout["proxy"] / "proxy.sock", 0o666)
    door.listen(1)
    door.settimeout(60)

    def answer():
        try:
            conn, _ = door.accept()
            conn.sendall(b"pong")
            conn.close()
        except OSError:
            pass
    threading.Thread(target=answer, daemon=True).start()
    forbidden = [str(layout["project"] / ".env"), str(layout["data"] / "nanoclaw.db"),
                 str(layout["other"] / "inbound.db"), str(PROJECT_ROOT / ".env"), "/etc/shadow"]
    spec = make_spec(layout, PROBE, env={"PROBE_PORT": str(listener.getsockname()[1]),
                                         "PROBE_FORBIDDEN": json.dumps(forbidden)})
    runtime.start(spec)
    report = wait_for(lambda: read_json(layout["session"] / "report.json"), timeout=60)
    assert report, f"no report from the sandbox; its log:\n{runtime.logs(spec.name)}"

    assert report["uid"] == 1000 and report["gid"] == 1000
    assert report["cwd"] == "/workspace/group"
    assert report["home"] == "/workspace/session/home" and report["write_home"][0] == "ok"
    assert report["env"]["PYTHONPATH"] == "/opt/nanoclaw"
    # No network: the host's loopback listener is unreachable, names do not resolve, only lo exists.
    assert report["tcp_host"][0] == "error"
    assert report["dns"][0] == "error"
    assert report["interfaces"] == ["lo"]
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()
    # Mounts: global read-only, group read-write, proxy dir readable.
    assert report["write_global"][0] == "error"
    assert not (layout["global"] / "new.txt").exists()
    assert report["read_global"] == ["ok", "shared notes"]
    assert report["write_group"][0] == "ok"
    assert (layout["group"] / "from-sandbox.txt").read_text() == "x"
    assert report["read_proxy"] == ["ok", "through the proxy dir"]
    assert report["proxy_socket"] == ["ok", "pong"]
    door.close()
    # Secrets: none in the environment, no host secret file readable or even present.
    assert "ANTHROPIC_API_KEY" not in report["env"] and "NANOCLAW_TEST_HOST_ONLY" not in report["env"]
    assert HOST_SECRET not in json.dumps(report["env"])
    for path, outcome in report["read_forbidden"].items():
        assert outcome[0] == "error", f"the sandbox could read {path}"
    assert SENTINEL not in json.dumps(report)
    assert report["secret_named_files"] == []
    # The agent's Python has the SDK version the project pins.
    assert report["sdk"] == ["ok", sdk_pin()]
    assert report["cli"][0] == "ok" and "Claude Code" in report["cli"][1], report["cli"]


HOST_FILES_PROBE = r'''
import json, os
S, I = "/workspace/session", "/workspace/inbound"
def attempt(fn):
    try:
        return ["ok", fn()]
    except Exception as e:
        return ["error", type(e).__name__]
def append(path):
    with open(path, "a") as f:
        f.write("forged")
def create(path):
    with open(path, "w") as f:
        f.write("agent")
r = {
    "read_inbound": attempt(lambda: open(I + "/inbound.db").read()),
    "append_inbound": attempt(lambda: append(I + "/inbound.db")),
    "remove_inbound": attempt(lambda: os.remove(I + "/inbound.db")),
    "rename_inbound": attempt(lambda: os.rename(I + "/inbound.db", I + "/old.db")),
    "plant_wal": attempt(lambda: create(I + "/inbound.db-wal")),
    "plant_shm": attempt(lambda: create(I + "/inbound.db-shm")),
    "plant_journal": attempt(lambda: create(I + "/inbound.db-journal")),
    "plant_link": attempt(lambda: os.symlink("/workspace/session/x.db", I + "/inbound.db-wal")),
    "replace_inbound": attempt(lambda: (create(S + "/new.db"), os.rename(S + "/new.db", I + "/inbound.db"))[1]),
    "write_inbox": attempt(lambda: create(I + "/inbox/forged.txt")),
    "read_inbox": attempt(lambda: open(I + "/inbox/photo.txt").read()),
    "create_outbound": attempt(lambda: create(S + "/outbound.db")),
    "outbox": attempt(lambda: (os.makedirs(S + "/outbox", exist_ok=True), create(S + "/outbox/a.txt"))[1]),
    "heartbeat": attempt(lambda: os.utime(S + "/outbound.db")),
}
json.dump(r, open(S + "/host-files.json", "w"))
'''


def test_host_files_in_the_session_are_read_only_for_the_agent(runtime, layout):
    """The one-writer rule: an agent that could rewrite inbound.db, or plant a -wal, -shm, journal or
    link beside it for the host's next open to replay, could forge or re-route messages."""
    session, inbound = layout["session"], layout["inbound"]
    (inbound / "inbound.db").write_text("HOSTDB")
    (inbound / "inbox").mkdir()
    (inbound / "inbox" / "photo.txt").write_text("from the user")
    spec = make_spec(layout, HOST_FILES_PROBE)
    runtime.start(spec)
    r = wait_for(lambda: read_json(session / "host-files.json"), timeout=60)
    assert r, runtime.logs(spec.name)
    assert r["read_inbound"] == ["ok", "HOSTDB"] and r["read_inbox"] == ["ok", "from the user"]
    for key in ("append_inbound", "remove_inbound", "rename_inbound", "plant_wal", "plant_shm", "plant_journal",
                "plant_link", "replace_inbound", "write_inbox"):
        assert r[key][0] == "error", key
    assert (inbound / "inbound.db").read_text() == "HOSTDB"
    assert sorted(p.name for p in inbound.iterdir()) == ["inbound.db", "inbox"]  # nothing beside it
    assert not (inbound / "inbox" / "forged.txt").exists()
    for key in ("create_outbound", "outbox", "heartbeat"):
        assert r[key][0] == "ok", (key, r[key])
    # The host can still write its file after the agent ran.
    (inbound / "inbound.db").write_text("HOSTDB2")


def test_memory_limit_is_enforced(runtime, layout):
    program = ("open('/workspace/session/before', 'w').close()\n"
               "blob = b'x' * (400 * 2**20)\n"
               "open('/workspace/session/after', 'w').close()\n")
    spec = make_spec(layout, program, memory_mb=128)
    runtime.start(spec)
    if isinstance(runtime, docker_rt.DockerRuntime):
        info = runtime.client.api.inspect_container(spec.name)["HostConfig"]
        assert info["Memory"] == 128 * 2**20 and info["PidsLimit"] == spec.pids
        assert info["NetworkMode"] == "none" and info["NanoCpus"] == int(spec.cpus * 1e9)
    assert wait_for(lambda: (layout["session"] / "before").exists(), timeout=60), runtime.logs(spec.name)
    assert wait_for(lambda: not runtime.is_running(spec.name), timeout=60)
    assert not (layout["session"] / "after").exists(), "the sandbox allocated 400 MiB under a 128 MiB limit"


def test_bwrap_sandbox_lives_in_its_own_cgroup(layout, tmp_path):
    require(bwrap_rt.probe() is None, "bubblewrap does not work here")
    rt = bwrap_rt.BwrapRuntime(tmp_path / "state")
    spec = make_spec(layout, "import time; time.sleep(30)", memory_mb=300, pids=64)
    rt.start(spec)
    try:
        pid = rt.pid_of(spec.name)
        assert pid is not None
        limit = limits.memory_limit_of(pid)
        placement = json.loads((tmp_path / "state" / f"{spec.name}.pid").read_text())["limits"]
        if placement.startswith("cgroup"):
            assert limit == 300 * 2**20, placement
        else:  # no writable cgroup on this host: the prlimit fallback is what we promise
            assert placement.startswith("prlimit")
    finally:
        rt.stop(spec.name, timeout=1)
    assert not rt.is_running(spec.name)


# --- lifecycle -------------------------------------------------------------------------

SLEEPER = ("import os, time\n"
           "with open('/workspace/session/starts.log', 'a') as f:\n"
           "    f.write('started\\n')\n"
           "time.sleep(120)\n")


def test_concurrent_starts_make_one_sandbox_that_list_finds_and_stop_stops(runtime, layout):
    spec = make_spec(layout, SLEEPER)
    barrier = threading.Barrier(2)
    errors = []

    def start():
        barrier.wait()
        try:
            runtime.start(spec)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    starts = layout["session"] / "starts.log"
    assert wait_for(lambda: starts.exists(), timeout=60), runtime.logs(spec.name)
    runtime.start(spec)  # a third, later call: still the same sandbox
    time.sleep(1.5)
    assert starts.read_text().count("started") == 1
    assert runtime.is_running(spec.name)
    assert runtime.list_sandboxes(spec.labels[INSTALL_LABEL]) == [spec.name]
    assert spec.name not in runtime.list_sandboxes("some-other-install")

    runtime.stop(spec.name, timeout=2)
    assert not runtime.is_running(spec.name)
    assert runtime.list_sandboxes(spec.labels[INSTALL_LABEL]) == []
    if isinstance(runtime, docker_rt.DockerRuntime):
        assert runtime.client.containers.list(all=True, filters={"name": spec.name}) == []
    runtime.stop(spec.name)  # stopping what is gone is fine


@pytest.fixture
def docker_runtime():
    yield from stopping_what_it_starts(make_docker_runtime())


def test_docker_knows_a_live_sandbox_without_asking_the_engine_and_a_dead_one_at_once(docker_runtime, layout):
    """Every message asks whether its sandbox runs, and the delivery loop lists the running ones
    every 2 s. While the container's first process lives the answer comes from /proc; a container killed behind our back (OOM, `docker kill`) is seen as
    stopped on the next question, and one started again under the same name is seen as running."""
    runtime = docker_runtime
    spec = make_spec(layout, SLEEPER)
    starts = layout["session"] / "starts.log"

    def started() -> int:
        return starts.read_text().count("started") if starts.exists() else 0

    runtime.start(spec)
    assert wait_for(lambda: runtime.is_running(spec.name) and started() == 1, timeout=60), runtime.logs(spec.name)
    asked = []
    inspect = runtime.client.api.inspect_container  # what containers.get(name) asks the engine
    runtime.client.api.inspect_container = lambda name: (asked.append(name), inspect(name))[1]
    assert all(runtime.is_running(spec.name) for _ in range(20))
    assert runtime.list_sandboxes(spec.labels[INSTALL_LABEL]) == [spec.name]  # one list call, no inspect each
    assert asked == [], runtime._seen

    runtime.client.containers.get(spec.name).kill()  # not through the runtime: as the kernel's OOM killer would
    assert wait_for(lambda: not runtime.is_running(spec.name), timeout=10), runtime.logs(spec.name)
    assert asked  # the engine was asked once /proc no longer showed the process
    runtime.start(spec)  # the dead one makes room for a new one under the same name
    assert wait_for(lambda: runtime.is_running(spec.name) and started() == 2, timeout=60), runtime.logs(spec.name)
    asked.clear()
    assert runtime.is_running(spec.name) and asked == [], (asked, runtime._seen)
    runtime.stop(spec.name, timeout=2)
    assert not runtime.is_running(spec.name)


def test_a_process_start_time_tells_a_reused_pid_apart(tmp_path):
    odd = tmp_path / "sle) (ep 1 2"  # a process name with the brackets and spaces /proc/PID/stat shows
    odd.symlink_to("/bin/sleep")
    proc = subprocess.Popen([str(odd), "30"])
    try:
        started = wait_for(lambda: docker_rt.proc_start_time(proc.pid))
        with open(f"/proc/{proc.pid}/stat") as f:
            assert started == f.read().split()[-31]  # field 22 of 52, counted from the end
        assert docker_rt.SeenRunning(proc.pid, started).still_runs()
        assert not docker_rt.SeenRunning(proc.pid, str(int(started) - 1)).still_runs()  # another process, same pid
    finally:
        proc.kill()
        proc.wait()
    assert docker_rt.proc_start_time(proc.pid) is None
    assert not docker_rt.SeenRunning(proc.pid, started).still_runs()
    assert not docker_rt.in_container(os.getpid(), "0" * 64)


def test_stop_asks_the_agent_to_finish_first(runtime, layout):
    program = ("import signal, sys, time\n"
               "def bye(*_):\n"
               "    open('/workspace/session/got-term', 'w').close()\n"
               "    sys.exit(0)\n"
               "signal.signal(signal.SIGTERM, bye)\n"
               "open('/workspace/session/up', 'w').close()\n"
               "time.sleep(120)\n")
    spec = make_spec(layout, program)
    runtime.start(spec)
    assert wait_for(lambda: (layout["session"] / "up").exists(), timeout=60), runtime.logs(spec.name)
    runtime.stop(spec.name, timeout=5)
    assert (layout["session"] / "got-term").exists()
    assert not runtime.is_running(spec.name)


def test_exited_sandbox_can_be_inspected_then_restarted(runtime, layout):
    program = ("import sys\n"
               "open('/workspace/session/runs.log', 'a').write('run\\n')\n"
               "print('agent says bye', flush=True)\n"
               "sys.exit(3)\n")
    spec = make_spec(layout, program)
    runs = layout["session"] / "runs.log"
    runtime.start(spec)
    assert wait_for(lambda: not runtime.is_running(spec.name) and runs.exists(), timeout=60)
    assert "agent says bye" in runtime.logs(spec.name)  # a crashed sandbox's output stays readable
    runtime.start(spec)  # the dead one made room for a new one under the same name
    assert wait_for(lambda: runs.read_text().count("run") == 2, timeout=60), runtime.logs(spec.name)


def test_bwrap_finds_its_sandboxes_after_a_host_restart(layout, tmp_path):
    require(bwrap_rt.probe() is None, "bubblewrap does not work here")
    state = tmp_path / "state"
    first = bwrap_rt.BwrapRuntime(state)
    spec = make_spec(layout, SLEEPER)
    first.start(spec)
    try:
        again = bwrap_rt.BwrapRuntime(state)  # a new host process reads the pidfiles
        assert again.is_running(spec.name)
        assert again.list_sandboxes(spec.labels[INSTALL_LABEL]) == [spec.name]
        again.stop(spec.name, timeout=1)
        assert not again.is_running(spec.name) and not first.is_running(spec.name)
    finally:
        first.stop(spec.name, timeout=1)
    # A pidfile whose pid now belongs to another process is not taken for the sandbox.
    (state / f"{spec.name}.pid").write_text(json.dumps({"pid": os.getpid(), "labels": spec.labels}))
    assert not bwrap_rt.BwrapRuntime(state).is_running(spec.name)


def test_start_refuses_a_spec_carrying_a_secret(runtime, layout):
    spec = make_spec(layout, "print(1)", env={"SOME_VAR": f"Bearer {HOST_SECRET}"})
    with pytest.raises(SecretInSandbox):
        runtime.start(spec)
    assert not runtime.is_running(spec.name)


# --- pure parts ------------------------------------------------------------------------

def test_assert_no_secrets():
    assert_no_secrets({"TZ": "UTC", "NANOCLAW_ASSISTANT_NAME": "Andy"}, ["sk-ant-abcdef123", None, ""])
    with pytest.raises(SecretInSandbox) as exc:
        assert_no_secrets({"X": "sk-ant-abcdef123"}, ["sk-ant-abcdef123"])
    assert "sk-ant" not in str(exc.value)  # the message names the variable, never the value
    with pytest.raises(SecretInSandbox):
        assert_no_secrets({"X": "prefix-sk-ant-abcdef123-suffix"}, ["sk-ant-abcdef123"])
    with pytest.raises(SecretInSandbox):
        assert_no_secrets({"CLAUDE_CODE_OAUTH_TOKEN": "placeholder"}, [])
    assert_no_secrets({"N": "1"}, ["1"])  # a too-short "secret" would match everything


def test_check_spec_rules(layout):
    good = make_spec(layout, "print(1)")
    check_spec(good, [])
    from dataclasses import replace
    for bad in (replace(good, name="bad/name"), replace(good, labels={}), replace(good, uid=0),
                replace(good, command=("python3", "-c", f"print('{HOST_SECRET}')"))):
        with pytest.raises(ValueError):
            check_spec(bad, [HOST_SECRET])
    assert extra_target(Mount(Path("/x"), "docs")) == "/workspace/extra/docs"
    assert extra_target(Mount(Path("/x"), "/workspace/extra/docs")) == "/workspace/extra/docs"
    for target in ("/etc", "../x", "/workspace/extra/a/b", "/workspace/group"):
        with pytest.raises(ValueError):
            extra_target(Mount(Path("/x"), target))


def test_extra_mounts_ro_and_rw(runtime, layout, tmp_path):
    ro, rw = tmp_path / "ro", tmp_path / "rw"
    ro.mkdir()
    rw.mkdir()
    (ro / "book.txt").write_text("read me")
    os.chmod(rw, 0o777)
    program = ("import json\n"
               "r = {'read': open('/workspace/extra/books/book.txt').read()}\n"
               "try:\n    open('/workspace/extra/books/new', 'w').close(); r['ro_write'] = 'ok'\n"
               "except OSError as e:\n    r['ro_write'] = 'error'\n"
               "open('/workspace/extra/scratch/out.txt', 'w').write('written')\n"
               "json.dump(r, open('/workspace/session/extra.json', 'w'))\n")
    spec = make_spec(layout, program, extra_mounts=(Mount(ro, "books"), Mount(rw, "scratch", readonly=False)))
    runtime.start(spec)
    report = wait_for(lambda: read_json(layout["session"] / "extra.json"), timeout=60)
    assert report == {"read": "read me", "ro_write": "error"}, runtime.logs(spec.name)
    assert (rw / "out.txt").read_text() == "written"


def test_mirror_from_apt_sources():
    deb822 = ("Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
              "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\n"
              "Suites: bookworm-security\n")
    assert mirror_from_sources("", [deb822]) == "http://mirror.example/debian"
    one_line = ("# comment\ndeb [signed-by=/k.gpg] http://one.example/debian/ bookworm main\n"
                "deb http://one.example/debian-security bookworm-security main\n")
    assert mirror_from_sources(one_line, [deb822]) == "http://one.example/debian"
    assert mirror_from_sources("deb http://x/debian bullseye main", []) is None
    assert mirror_from_sources("", ["Types: deb\nEnabled: no\nURIs: http://off/\nSuites: bookworm\n"]) is None


def test_select_runtime(make_settings, monkeypatch):
    lines: list[str] = []
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(RuntimeUnavailable) as exc:
        select_runtime(make_settings(NANOCLAW_RUNTIME="docker"), lines.append)
    assert "docker-engine.sh" in str(exc.value)
    if bwrap_rt.probe() is None:
        chosen = select_runtime(make_settings(NANOCLAW_RUNTIME="auto"), lines.append)
        assert chosen.name == "bwrap" and any("not docker" in line for line in lines)
        assert select_runtime(make_settings(NANOCLAW_RUNTIME="bwrap"), lines.append).name == "bwrap"
    monkeypatch.setattr(bwrap_rt, "probe", lambda: "bwrap is not installed")
    with pytest.raises(RuntimeUnavailable) as exc:
        select_runtime(make_settings(NANOCLAW_RUNTIME="auto"), lines.append)
    assert "image build" in str(exc.value) and "bubblewrap" in str(exc.value)


def test_select_runtime_prefers_a_docker_engine_with_the_image(make_settings):
    client = docker_client()
    require(client is not None, "no Docker engine answers (scripts/docker-engine.sh start)")
    settings = make_settings()
    require(image_exists(settings, client=client), f"image {settings.agent_image} is missing")
    lines: list[str] = []
    chosen = select_runtime(settings, lines.append)
    assert chosen.name == "docker" and "docker" in lines[-1]


# --- the real SDK inside the sandbox ----------------------------------------------------

SDK_PROBE = r'''
import asyncio, json, socket, threading
def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
def relay():  # 127.0.0.1 -> the proxy socket: the sandbox's only way to the model
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    def serve():
        while True:
            conn, _ = srv.accept()
            up = socket.socket(socket.AF_UNIX)
            up.connect("/run/nanoclaw-proxy/proxy.sock")
            threading.Thread(target=pump, args=(conn, up), daemon=True).start()
            threading.Thread(target=pump, args=(up, conn), daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]
from claude_agent_sdk import AssistantMessage, ClaudeAgentOptions, TextBlock, query
async def main():
    port = relay()
    options = ClaudeAgentOptions(permission_mode="bypassPermissions", tools=[], cwd="/workspace/group",
                                 env={"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
                                      "ANTHROPIC_API_KEY": "placeholder", "CLAUDE_CODE_MAX_RETRIES": "0"})
    texts = []
    async for message in query(prompt="hello from the sandbox", options=options):
        if isinstance(message, AssistantMessage):
            texts += [b.text for b in message.content if isinstance(b, TextBlock)]
    return texts
result = {"texts": asyncio.run(main())}
json.dump(result, open("/workspace/session/sdk.json", "w"))
'''


def test_claude_sdk_answers_from_inside_the_sandbox(runtime, layout):
    """Uid 1000, read-only root, HOME in the session, no network: the bundled CLI still works."""
    from tests.fakes.model_api import FakeModel

    with FakeModel() as model:
        door = socket.socket(socket.AF_UNIX)
        door.bind(str(layout["proxy"] / "proxy.sock"))
        os.chmod(layout["proxy"] / "proxy.sock", 0o666)
        door.listen(16)
        stop = threading.Event()

        def serve():  # stands in for the host proxy: unix socket -> the fake model's port
            door.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = door.accept()
                except OSError:
                    continue
                up = socket.create_connection(("127.0.0.1", model.port))
                for a, b in ((conn, up), (up, conn)):
                    threading.Thread(target=_pump, args=(a, b), daemon=True).start()
        threading.Thread(target=serve, daemon=True).start()
        spec = make_spec(layout, SDK_PROBE, env={"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                                                  "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
                                                  "DISABLE_AUTOUPDATER": "1"})
        try:
            runtime.start(spec)
            report = wait_for(lambda: read_json(layout["session"] / "sdk.json"), timeout=90)
        finally:
            stop.set()
        assert report, runtime.logs(spec.name)
        assert report["texts"] == ["echo: hello from the sandbox"]
        # The CLI kept its state in the session's HOME, so a restarted sandbox can resume.
        assert (layout["session"] / "home" / ".claude").is_dir()


def test_a_sandbox_that_cannot_start_says_so(runtime, layout, tmp_path):
    spec = make_spec(layout, "print(1)", extra_mounts=(Mount(tmp_path / "does-not-exist", "gone"),))
    with pytest.raises(Exception) as exc:
        runtime.start(spec)
    assert "does-not-exist" in str(exc.value)
    assert not runtime.is_running(spec.name)


HARDENING_PROBE = r'''
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
def attempt(fn):
    rc = fn()
    return "ok" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
os.makedirs("/tmp/m", exist_ok=True)
r = {"unshare_user": attempt(lambda: libc.unshare(0x10000000)),
     "unshare_net": attempt(lambda: libc.unshare(0x40000000)),
     "mount": attempt(lambda: libc.mount(b"none", b"/tmp/m", b"tmpfs", 0, None)),
     "fork": "ok" if os.fork() or os._exit(0) is None else "ok"}
os.wait()
json.dump(r, open("/workspace/session/hardening.json", "w"))
'''


def test_bwrap_sandbox_refuses_namespaces_and_mounts(layout):
    """Issue 15, hole 7: what Docker's default seccomp profile refuses, refused under bubblewrap too."""
    require(bwrap_rt.probe() is None, "bubblewrap does not work here")
    rt = bwrap_rt.BwrapRuntime(layout["data"] / "run" / "bwrap", secrets=[HOST_SECRET])
    spec = make_spec(layout, HARDENING_PROBE)
    rt.start(spec)
    try:
        report = wait_for(lambda: read_json(layout["session"] / "hardening.json"), timeout=60)
        assert report, rt.logs(spec.name)
    finally:
        rt.stop(spec.name, timeout=1)
    assert report["unshare_user"] == "EPERM" and report["unshare_net"] == "EPERM", report
    assert report["mount"] == "EPERM" and report["fork"] == "ok", report
    assert bwrap_rt.disables_userns() == ("--disable-userns" in subprocess.run(
        ["bwrap", "--help"], capture_output=True, text=True).stdout)
