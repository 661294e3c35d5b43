"""Sandboxes on another machine (issue 33), end to end: a second Docker engine in its own network
namespace (scripts/remote-engine.sh), reached over TCP with TLS and client certificates, whose
sandboxes see none of this machine's folders and reach their sessions only through the door's TLS
gate. The real service parts, runner, SDK and CLI; the model and Telegram are faked at HTTP."""
from __future__ import annotations

import contextlib
import shutil
import subprocess
import time

import pytest

from conftest import require

from nanoclaw.lifecycle import background
from nanoclaw.sessions import store
from tests.inbound import test_media_e2e as media
from tests.inbound.test_attachments import ALICE, fixture
from tests.outbound import test_progress_e2e as progress
from tests.outbound.test_nudges import OWNER, _script
from tests.remote.flow import HeldTurn, owner_dm
from tests.service_harness import free_port
from tests.fakes.model_api import Reply
from tests.tg_flow import message, sandbox_service, sent, texts

@pytest.fixture
def remote(engine_env, monkeypatch):
    for name in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH"):
        monkeypatch.setenv(name, engine_env[name])
    port = free_port()
    # the sandboxes get no network; their door relays use the engine's own (its namespace has no bridge)
    return dict(NANOCLAW_DOOR_LISTEN=f"{engine_env['NANOCLAW_TEST_DOOR_ADDRESS']}:{port}",
                NANOCLAW_DOOR_RELAY_NETWORK="host")


def only_on_the_second_engine(svc):
    names = svc.runtime.list_sandboxes(svc.settings.install_id)
    assert names and svc.runtime.door is not None
    assert svc.runtime.client.api.base_url.startswith("https://198.18.0.2")
    for name in names:
        attrs = svc.runtime.client.containers.get(name).attrs
        assert [m["Type"] for m in attrs["Mounts"]] == ["volume"]  # the relay's socket; nothing of this machine
        assert attrs["HostConfig"]["NetworkMode"] == "none"
    return names


PROBE = r"""python3 - <<'PY'
import socket
for host, port in (("169.254.169.254", 80), ("198.18.0.1", %(listener)d), ("198.18.0.1", %(door)d)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("REACHED", host, port)
    except OSError as exc:
        print("BLOCKED", host, port, type(exc).__name__)
PY"""


class Listener:
    """A port of the engine's host (this machine, on the engine's link) beside the door."""

    def __init__(self, address: str):
        import socket
        self.sock = socket.socket()
        self.sock.bind((address, 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]

    def close(self):
        self.sock.close()


def probing(listener: int, door: int):
    def brain(req):
        results = req.turn_tool_results()
        if "probe" not in req.current_prompt():
            return _script(req)
        if not results:
            return Reply.call("Bash", command=PROBE % {"listener": listener, "door": door})
        return Reply.say("probe: " + " | ".join(l for l in results[-1].text.splitlines() if l.startswith(("REACHED",
                                                                                                          "BLOCKED"))))
    return brain


@pytest.mark.parametrize("explicit", [False, True])
def test_a_remote_sandbox_reaches_the_door_and_nothing_else(make_settings, sqlite_url, remote, engine_env, caplog,
                                                            explicit):
    """By default: no network, a relay to the door only; the cloud metadata address, the engine's host
    and even the door's port are out of reach from inside. Naming a network is the operator's own
    choice: the sandbox then reaches what it reaches, and each start says so in the log."""
    host_side = engine_env["NANOCLAW_TEST_DOOR_ADDRESS"]
    listener = Listener(host_side)
    door_port = int(remote["NANOCLAW_DOOR_LISTEN"].rsplit(":", 1)[1])
    env = {**remote, **({"NANOCLAW_SANDBOX_NETWORK": "host"} if explicit else {})}
    try:
        with sandbox_service(make_settings, sqlite_url, probing(listener.port, door_port), runtime="docker",
                             **env) as svc:
            owner_dm(svc)
            svc.post(message(111, OWNER, "probe the network"))
            said = svc.wait(lambda: next((t for t in texts(svc.tg, 111) if t.startswith("probe:")), None),
                            timeout=120, what="the probe's report")
    finally:
        listener.close()
    if explicit:
        assert f"REACHED {host_side} {listener.port}" in said
        assert "joins the engine's network 'host'" in caplog.text
        return
    for target in ("169.254.169.254 80", f"{host_side} {listener.port}", f"{host_side} {door_port}"):
        assert f"BLOCKED {target}" in said, said


def test_a_photo_in_and_a_picture_back(make_settings, sqlite_url, remote):
    with sandbox_service(make_settings, sqlite_url, media.brain, runtime="docker", **remote) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", f"telegram:{ALICE}", "--role", "owner")
        svc.cli("wire", "telegram", str(ALICE), "andy")
        (svc.settings.groups_dir / "andy" / "CLAUDE.md").write_text("Remember: the cable is blue.\n")

        photo = fixture("telegram", "album_photo_1")
        del photo["message"]["media_group_id"]
        photo["message"]["caption"] = "what is this?"
        svc.tg.add_file(media.photo_jpeg(), file_id="AgACAgIAAxk-a1-x", file_path="photos/file_1.jpg")
        svc.post(photo)
        svc.wait(lambda: "A picture of a cable." in [m["text"] for m in sent(svc.tg)], what="the photo's answer")
        only_on_the_second_engine(svc)
        call = next(c for c in svc.model.model_calls() if c.blocks("image"))
        assert "the cable is blue" in call.all_text()  # the group's CLAUDE.md came down through the door

        svc.post(fixture("telegram", "private_message") | {"update_id": 900000099} | {
            "message": {**fixture("telegram", "private_message")["message"], "text": "send me a chart",
                        "message_id": 99}})
        svc.wait(lambda: svc.tg.calls("sendPhoto"), what="the chart as a photo")
        chart = svc.settings.groups_dir / "andy" / "chart.png"
        svc.wait(chart.exists, what="the chart made in the sandbox, back in the host's group folder")


def test_a_sandbox_killed_mid_turn_answers_once(make_settings, sqlite_url, remote, monkeypatch):
    monkeypatch.setattr(background, "SWEEP_INTERVAL_S", 1.0)
    slow = HeldTurn()
    with sandbox_service(make_settings, sqlite_url, slow, runtime="docker", **remote) as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "slow one"))
        assert slow.held.wait(90), "the model call never came"
        [name] = only_on_the_second_engine(svc)
        svc.runtime.client.containers.get(name).kill()  # SIGKILL, mid-turn
        slow.release()
        svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer after the restart")
        svc.post(message(111, OWNER, "after"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=90, what="the next answer")
        assert texts(svc.tg, 111) == ["answer to slow one", "answer to after"]


def test_a_stopped_sandbox_wakes_with_its_conversation(make_settings, sqlite_url, remote):
    with sandbox_service(make_settings, sqlite_url, _script, runtime="docker", **remote) as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "my name is Olivia"))
        svc.wait(lambda: texts(svc.tg, 111), what="the first answer")
        [name] = only_on_the_second_engine(svc)
        svc.runtime.stop(name)  # as the idle sweep does
        [session] = [p for p in (svc.settings.sessions_dir / "andy").iterdir() if p.is_dir()]
        transcripts = list((store.agent_part(session) / "home").rglob("*.jsonl"))
        assert transcripts, "the transcript did not come back to the host"
        svc.post(message(111, OWNER, "what is my name?"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, what="the answer after the wake")
        resumed = svc.model.model_calls()[-1]
        assert "my name is Olivia" in resumed.all_text()  # the conversation went on from the host's copy


def test_a_long_turn_shows_its_progress(make_settings, sqlite_url, remote):
    with sandbox_service(make_settings, sqlite_url, progress.brain, runtime="docker", NANOCLAW_PROGRESS_AFTER_S=1,
                         NANOCLAW_PROGRESS_EDIT_S=1, **remote) as svc:
        chat = progress.Telegram(svc)
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", chat.user, "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", chat.chat, "andy", "--kind", "dm")
        chat.say("please run the checks")
        svc.wait(lambda: any(t == "All checks passed." for _i, t in chat.sent()), what="the long answer")
        only_on_the_second_engine(svc)
        drafts = [d["text"] for d in svc.tg.calls("sendMessageDraft")]  # a private chat: the status is a draft
        assert drafts and all(t.startswith(progress.WORKING) for t in drafts), drafts
        assert not [t for _i, t in chat.sent() if t.startswith(progress.WORKING)], chat.sent()
        assert "running" in " ".join(drafts)  # the current tool came up through the door


def _files_script(req):
    prompt, done = req.current_prompt(), req.turn_tool_results()
    if "write the notes" in prompt and not done:
        return Reply.call("Bash", command="mkdir -p /workspace/group/notes && printf draft > /workspace/group/notes/a.txt"
                                          " && printf mine > /workspace/group/b.txt && printf old > /workspace/group/old.txt")
    if "remove the notes" in prompt and not done:
        return Reply.call("Bash", command="cat /workspace/group/b.txt; echo; ls /workspace/group;"
                                          " rm /workspace/group/notes/a.txt")
    if "remove the notes" in prompt:
        return Reply.say(f"saw: {done[-1].text}")
    return Reply.say("done")


def test_files_changed_on_either_side_reach_the_other(make_settings, sqlite_url, remote):
    """The group folder both ways: files made in the sandbox land on the host; what the host changed
    and removed meanwhile is in the sandbox before the next message's turn; a file removed in the
    sandbox is gone on the host."""
    with sandbox_service(make_settings, sqlite_url, _files_script, runtime="docker", **remote) as svc:
        owner_dm(svc)
        group = svc.settings.groups_dir / "andy"
        svc.post(message(111, OWNER, "write the notes"))
        svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the first answer")
        only_on_the_second_engine(svc)
        svc.wait(lambda: all((group / n).exists() for n in ("notes/a.txt", "b.txt", "old.txt")), timeout=60,
                 what="the files made in the sandbox, on the host")
        (group / "b.txt").write_text("theirs")  # a newer version from elsewhere
        (group / "news.txt").write_text("new")
        (group / "old.txt").unlink()

        svc.post(message(111, OWNER, "remove the notes"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=120, what="the second answer")
        seen = texts(svc.tg, 111)[1]
        assert "theirs" in seen and "news.txt" in seen and "old.txt" not in seen, seen
        svc.wait(lambda: not (group / "notes" / "a.txt").exists(), timeout=60,
                 what="the file removed in the sandbox, gone on the host")
        assert (group / "b.txt").read_text() == "theirs" and not (group / "old.txt").exists()


def test_a_file_written_mid_turn_survives_a_kill_of_the_sandbox(make_settings, sqlite_url, remote):
    """Changed files go up during a turn too (every few seconds), not only between turns: a sandbox
    killed in a long turn loses at most the last few seconds of its files."""
    held = HeldTurn("draft it")

    def brain(req):
        if "draft it" in req.current_prompt() and not req.turn_tool_results():
            return Reply.call("Bash", command="printf 'half a plan' > /workspace/group/plan.txt")
        return held(req)
    with sandbox_service(make_settings, sqlite_url, brain, runtime="docker", **remote) as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "draft it"))
        assert held.held.wait(90), "the model call after the file was written never came"
        plan = svc.settings.groups_dir / "andy" / "plan.txt"
        svc.wait(plan.exists, timeout=30, what="the file written mid-turn, on the host while the turn runs")
        [name] = only_on_the_second_engine(svc)
        svc.runtime.client.containers.get(name).kill()  # SIGKILL: no last upload
        held.release()
        svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer after the restart")
        assert plan.read_text() == "half a plan"


def package_brain(req):
    """Imports the approved module, then tries to write beside it."""
    results = req.turn_tool_results()
    if "use the package" in req.current_prompt() and not results:
        return Reply.call("Bash", command="python3 -c 'import garden_helper; print(garden_helper.GREETING)'; "
                                          "touch /workspace/packages/python/x 2>&1 | head -c 80")
    return Reply.say("package says: " + (results[-1].text if results else "nothing"))


def approve_a_package_and_use_it(svc) -> str:
    """The host's prefix of approved packages for andy holds a module; the agent uses it: its answer."""
    owner_dm(svc)
    prefix = svc.settings.data_dir / "packages" / "andy" / "python"
    prefix.mkdir(parents=True)
    (prefix / "garden_helper.py").write_text('GREETING = "tomatoes need sun"\n')
    svc.post(message(111, OWNER, "use the package"))
    svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer")
    [answer] = texts(svc.tg, 111)
    return answer


def test_an_approved_package_is_importable_in_a_remote_sandbox(make_settings, sqlite_url, remote):
    """The agent's approved packages (the host's prefix) come down through the door at the sandbox's
    start, checked against their digest, read-only; the agent's Python imports them."""
    with sandbox_service(make_settings, sqlite_url, package_brain, runtime="docker", **remote) as svc:
        answer = approve_a_package_and_use_it(svc)
        only_on_the_second_engine(svc)
        assert "tomatoes need sun" in answer, answer
        assert "Permission denied" in answer  # read-only for the agent


def test_a_chat_with_30000_acked_messages_keeps_answering(make_settings, sqlite_url, remote):
    """A busy chat kept for a year, its sandbox on the other engine: its session's acks go up as
    changes, not as the whole table (the door takes 20,000 rows a push: before, every push of such a
    session was refused)."""
    from nanoclaw.models import Session
    from nanoclaw.sessions import session_schema as schema
    from nanoclaw.sessions import store
    with sandbox_service(make_settings, sqlite_url, _script, runtime="docker", **remote) as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "one"))
        svc.wait(lambda: texts(svc.tg, 111), timeout=90, what="the first answer")
        only_on_the_second_engine(svc)
        for name in svc.runtime.list_sandboxes(svc.settings.install_id):
            svc.runtime.stop(name)
        session = store.session_path(svc.settings.sessions_dir, "andy", Session.get().id)
        old = [f"telegram:old-{n}" for n in range(30_000)]
        inbound = schema.connect(store.inbound_db(session))  # the host's own file: a year of answered messages
        with inbound:
            top = inbound.execute("SELECT MAX(seq) FROM messages_in").fetchone()[0]
            inbound.executemany("INSERT INTO messages_in (id, seq, kind, timestamp, status, trigger, content) VALUES "
                                "(?, ?, 'chat', ?, 'completed', 1, '{\"text\": \"old\"}')",
                                [(m, top + 1 + n, "2026-11-20T00:00:00.000Z") for n, m in enumerate(old)])
        inbound.close()
        path = store.agent_part(session) / schema.OUTBOUND
        conn = schema.connect(path)
        with conn:
            conn.executemany("INSERT INTO processing_ack (message_id, status, status_changed) VALUES (?, 'completed', ?)",
                             [(m, "2026-11-20T00:00:00.000Z") for m in old])
        conn.close()
        svc.post(message(111, OWNER, "two"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=90, what="the answer with a year of acks")
        assert texts(svc.tg, 111) == ["answer to one", "answer to two"]
        conn = schema.connect(path, readonly=True)
        assert conn.execute("SELECT COUNT(*) FROM processing_ack").fetchone()[0] == 30_002  # nothing lost either
        conn.close()


@contextlib.contextmanager
def package_proxy(address: str, folder):
    """A forward proxy (tinyproxy) on this machine's side of the engine's link, the engine's one way to
    a registry: Debian's mirror only, for the engine's address only (it has no other route)."""
    require(shutil.which("tinyproxy") is not None, "tinyproxy is not installed (.ci/run installs it)")
    port = free_port()
    (folder / "allowed").write_text("^deb\\.debian\\.org$\n")
    (folder / "tinyproxy.conf").write_text(
        f"Port {port}\nListen {address}\nAllow 198.18.0.2\nTimeout 120\nMaxClients 20\nFilterDefaultDeny Yes\n"
        f"Filter \"{folder / 'allowed'}\"\nFilterType ere\nFilterURLs Off\nConnectPort 443\n"
        f"LogFile \"{folder / 'tinyproxy.log'}\"\nLogLevel Info\n")
    proxy = subprocess.Popen(["tinyproxy", "-d", "-c", str(folder / "tinyproxy.conf")], stdout=subprocess.DEVNULL,
                             stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while (folder / "tinyproxy.log").read_text().count("listening on") < 1 if (folder / "tinyproxy.log").exists() \
                else True:
            assert proxy.poll() is None and time.monotonic() < deadline, "tinyproxy did not start"
            time.sleep(0.05)
        yield f"http://{address}:{port}"
    finally:
        proxy.terminate()
        proxy.wait(10)


def jq_brain(req):
    results = req.turn_tool_results()
    if "use jq" in req.current_prompt() and not results:
        return Reply.call("Bash", command="echo '{\"veg\": \"leek\"}' | jq -r .veg; jq --version")
    return Reply.say("jq says: " + (results[-1].text.strip() if results else "nothing"))


def test_an_approved_apt_package_is_built_into_the_agents_image_on_the_remote_engine(make_settings, sqlite_url, remote,
                                                                                     engine_env, monkeypatch,
                                                                                     tmp_path):
    """The approval of an apt package builds the agent's image on the engine its sandboxes run on,
    through that engine's API (nothing pulled: there is no registry to pull from), the engine
    reaching Debian through the operator's build proxy; the agent's next sandbox there has it."""
    from nanoclaw.models import AgentGroup
    from nanoclaw.operator.apply import set_packages
    with package_proxy(engine_env["NANOCLAW_TEST_DOOR_ADDRESS"], tmp_path) as proxy_url:
        monkeypatch.setenv("NANOCLAW_BUILD_PROXY", proxy_url)
        with sandbox_service(make_settings, sqlite_url, jq_brain, runtime="docker", **remote) as svc:
            owner_dm(svc)
            tag, _prefix, _old = set_packages(svc.settings, AgentGroup.get(AgentGroup.folder == "andy"),
                                              {"apt": ["jq"], "npm": [], "pip": []}, {"apt": ["jq"]})
            try:
                assert svc.runtime.client.images.get(tag).labels.get("nanoclaw.group") == "andy"
                assert "deb.debian.org" in (tmp_path / "tinyproxy.log").read_text()
                svc.post(message(111, OWNER, "use jq"))
                svc.wait(lambda: texts(svc.tg, 111), timeout=120, what="the answer")
                [name] = only_on_the_second_engine(svc)
                assert svc.runtime.client.containers.get(name).attrs["Config"]["Image"] == tag
                [answer] = texts(svc.tg, 111)
                assert "leek" in answer and "jq-1." in answer, answer
                history = " ".join(str(layer.get("CreatedBy")) for layer in svc.runtime.client.images.get(tag).history())
                assert proxy_url not in history  # the operator's proxy is not kept in the image
            finally:
                for name in svc.runtime.list_sandboxes(svc.settings.install_id):
                    svc.runtime.stop(name)
                svc.runtime.client.images.remove(tag, force=True)
