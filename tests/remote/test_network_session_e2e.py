"""Sessions over the network transport, end to end: the sandbox sees none of the host's folders and
reaches its session only through the door's TLS gate (real Docker, the real SDK against the fake
model, Telegram faked at HTTP)."""
from __future__ import annotations

import re
import time

from tests.fakes.model_api import Reply
from tests.outbound.test_nudges import OWNER, _script
from tests.remote.flow import owner_dm
from tests.service_harness import free_port
from tests.tg_flow import message, sandbox_service, texts


def network(port: int) -> dict:
    return dict(NANOCLAW_SESSION_TRANSPORT="network", NANOCLAW_DOOR_LISTEN=f"127.0.0.1:{port}",
                NANOCLAW_DOOR_URL=f"https://127.0.0.1:{port}", NANOCLAW_DOOR_RELAY_NETWORK="host")


def test_a_sandbox_without_the_hosts_folders_answers_and_restarts(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, _script, runtime="docker", **network(free_port())) as svc:
        assert svc.runtime.door is not None
        owner_dm(svc)
        for n, word in enumerate(("one", "two", "three"), start=1):
            svc.post(message(111, OWNER, word))
            svc.wait(lambda: len(texts(svc.tg, 111)) >= n, timeout=90, what=f"the answer to {word!r}")
            names = svc.runtime.list_sandboxes(svc.settings.install_id)
            mounts = svc.runtime.client.containers.get(names[0]).attrs["Mounts"]
            assert [m["Type"] for m in mounts] == ["volume"]  # the door relay's socket; none of this machine's folders
            for name in names:
                svc.runtime.stop(name)
        assert texts(svc.tg, 111) == ["answer to one", "answer to two", "answer to three"]


def _told_script(req):
    """Answers "answer to <the message>", and says so when its prompt carries the note of a lost write."""
    prompt = req.current_prompt()
    said = re.findall(r">([^<]*)</message>", prompt)
    return Reply.say(f"answer to {said[-1].strip()}" + (" (told)" if "after you changed it" in prompt else ""))


def test_the_agent_whose_shared_file_lost_to_another_sandbox_is_told_in_its_next_prompt(make_settings, sqlite_url,
                                                                                        tmp_path):
    """Two sandboxes of one agent share its group folder: the agent's real sandbox changes plan.md,
    another sandbox of the agent (its runner's file sync, in the test) overwrites the version it
    never saw; the first version is kept beside it and the first agent's next turn reads why."""
    from agent_runner.door_link import DoorLink
    from agent_runner.remote import RemoteSession
    from nanoclaw.config import install_secret
    from nanoclaw.models import Session
    from nanoclaw.remote import passes, starts
    from nanoclaw.remote.tls import door_tls
    from nanoclaw.sessions import store
    from nanoclaw.sessions.store import Target
    port = free_port()
    with sandbox_service(make_settings, sqlite_url, _told_script, runtime="docker", **network(port)) as svc:
        owner_dm(svc)
        group = svc.settings.groups_dir / "andy"
        group.mkdir(parents=True, exist_ok=True)
        (group / "plan.md").write_text("v0")
        svc.post(message(111, OWNER, "one"))
        svc.wait(lambda: texts(svc.tg, 111), timeout=90, what="the first answer")
        other = store.session_path(svc.settings.sessions_dir, "andy", "other")  # the agent's other sandbox
        store.prepare(other, Target("telegram", "222"))
        token = passes.mint(passes.door_key(install_secret(svc.settings)), passes.Claims(
            svc.settings.install_id, "andy", "other", starts.begin(other), int(time.time()) + 600))
        b = RemoteSession(DoorLink(f"https://127.0.0.1:{port}", token, door_tls(svc.settings).ca_pem),
                          tmp_path / "b" / "session", tmp_path / "b" / "inbound", tmp_path / "b" / "group",
                          tmp_path / "b" / "global")
        b.bootstrap()  # it has v0

        [name] = svc.runtime.list_sandboxes(svc.settings.install_id)
        done = svc.runtime.client.containers.get(name).exec_run(
            ["sh", "-c", "printf 'from A' > /workspace/group/plan.md"], user="1000")
        assert done.exit_code == 0, done.output
        svc.post(message(111, OWNER, "two"))  # its turn's start and end send the sandbox's changed files up
        svc.wait(lambda: (group / "plan.md").read_text() == "from A", timeout=60, what="A's version on the host")
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 2, timeout=90, what="the second answer")

        (b.trees["group"] / "plan.md").write_text("from B")  # over v0: it never saw A's
        b.sync_files()
        assert (group / "plan.md").read_text() == "from B"
        session_a = Session.get().id  # the one session the host made (the other is the test's)
        [kept] = [p for p in group.iterdir() if ".conflict-" in p.name]
        assert kept.name.startswith(f"plan.md.conflict-{session_a}-") and kept.read_text() == "from A"

        svc.post(message(111, OWNER, "three"))
        svc.wait(lambda: len(texts(svc.tg, 111)) >= 3, timeout=90, what="the third answer")
        assert texts(svc.tg, 111) == ["answer to one", "answer to two", "answer to three (told)"]


def test_a_sandbox_on_another_machine_streams_its_answer_through_the_door(make_settings, sqlite_url):
    """The answer so far goes up with the runner's pushes (at most every NANOCLAW_PROGRESS_EDIT_S) and
    shows as drafts in the owner's private chat before the finished answer arrives, once."""
    answer = " ".join(f"r{i:03x}" for i in range(240))  # 7 s at one word every 30 ms

    def script(req):
        return Reply.say(answer, chunk_delay_s=0.03) if "write" in req.current_prompt() else Reply.say("Hi.")
    with sandbox_service(make_settings, sqlite_url, script, runtime="docker", NANOCLAW_PROGRESS_EDIT_S=1,
                         **network(free_port())) as svc:
        owner_dm(svc)
        svc.post(message(111, OWNER, "write it"))
        svc.wait(lambda: answer in texts(svc.tg, 111), timeout=120, what="the answer")
        drafts = [d["text"] for d in svc.tg.calls("sendMessageDraft")]
        assert drafts and all(answer.startswith(d) for d in drafts), drafts  # only ever the answer's own words
        assert [d for d in drafts if len(d) < len(answer) // 2], drafts  # seen long before the end
        assert texts(svc.tg, 111).count(answer) == 1
