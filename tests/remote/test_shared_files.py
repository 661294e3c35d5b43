"""Two remote sandboxes of one agent share its group folder through the door (issue 44): changes and
removals go both ways, the last write to arrive wins, the version it overwrote unseen is kept beside
it and that session's agent is told in its next prompt, and both sandboxes end with the host's tree.
The real door, channel and runner side over TLS; the sandboxes' folders are local folders."""
from __future__ import annotations

import json
import time

from agent_runner.remote import RemoteSession
from agent_runner.tree_sync import plan_pull
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target
from tests.remote.test_gate import door, session_of  # noqa: F401 - the fixture


def sandbox_of(door, tmp_path, session_id):  # noqa: F811 - the fixture
    path, link = session_of(door, "andy", session_id)
    local = tmp_path / session_id
    sandbox = RemoteSession(link, local / "session", local / "inbound", local / "group", local / "global")
    sandbox.bootstrap()
    return path, sandbox


def two_sandboxes(door, tmp_path, **files):  # noqa: F811 - the fixture
    """The agent's group folder on the host with `files`, and two sandboxes of it that took it."""
    group = door.settings.groups_dir / "andy"
    group.mkdir(parents=True)
    for name, text in files.items():
        (group / name.replace("_", ".")).write_text(text)
    (path_a, a), (path_b, b) = sandbox_of(door, tmp_path, "s1"), sandbox_of(door, tmp_path, "s2")
    return group, path_a, a, path_b, b


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def notes(session_path) -> list[tuple[str, int, str]]:
    conn = schema.connect(store.inbound_db(session_path), readonly=True)
    try:
        return [(r[0], r[1], json.loads(r[2])["text"]) for r in
                conn.execute("SELECT kind, trigger, content FROM messages_in ORDER BY seq")]
    finally:
        conn.close()


def test_the_last_write_wins_the_loser_is_kept_and_told_and_both_sandboxes_end_alike(door, tmp_path):  # noqa: F811
    group, path_a, a, path_b, b = two_sandboxes(door, tmp_path, plan_md="v0", old_txt="to go")

    (a.trees["group"] / "plan.md").write_text("from A")
    a.sync_files()
    (b.trees["group"] / "plan.md").write_text("from B")  # over v0: B never saw A's
    (b.trees["group"] / "old.txt").unlink()
    b.sync_files()

    assert (group / "plan.md").read_text() == "from B" and not (group / "old.txt").exists()
    [kept] = [p for p in group.iterdir() if ".conflict-" in p.name]
    assert kept.name.startswith("plan.md.conflict-s1-") and kept.read_text() == "from A"
    [(kind, trigger, text)] = notes(path_a)
    assert (kind, trigger) == ("system", 0)  # waits for A's next turn, starts none
    assert "plan.md" in text and kept.name in text
    assert notes(path_b) == []

    a.sync_files()  # takes B's version, the kept copy and the removal (B took the copy after its upload)
    assert tree(a.trees["group"]) == tree(b.trees["group"]) == tree(group) == {
        "plan.md": b"from B", kept.name: b"from A"}


def test_a_removal_that_arrives_last_wins_and_keeps_the_change_it_never_saw(door, tmp_path):  # noqa: F811
    group, path_a, a, _path_b, b = two_sandboxes(door, tmp_path, list_md="v0")
    (a.trees["group"] / "list.md").write_text("A's additions")
    a.sync_files()
    (b.trees["group"] / "list.md").unlink()
    b.sync_files()
    assert not (group / "list.md").exists()
    [kept] = [p for p in group.iterdir() if p.name.startswith("list.md.conflict-s1-")]
    assert kept.read_text() == "A's additions"
    assert "removed list.md" in notes(path_a)[0][2]
    a.sync_files()
    b.sync_files()
    assert tree(a.trees["group"]) == tree(b.trees["group"]) == {kept.name: b"A's additions"}


def test_a_change_made_in_the_sandbox_is_never_overwritten_by_a_pull(door, tmp_path):  # noqa: F811
    group, _path_a, a, _path_b, b = two_sandboxes(door, tmp_path, draft_md="v0")
    (b.trees["group"] / "draft.md").write_text("B, not yet sent")
    (a.trees["group"] / "draft.md").write_text("A, sent")
    a.sync_files()
    b._pull_part(b._up, "group", b.trees["group"])  # a pull alone (as when a message comes down)
    assert (b.trees["group"] / "draft.md").read_text() == "B, not yet sent"
    b.sync_files()  # then B's goes up, last: it wins
    assert (group / "draft.md").read_text() == "B, not yet sent"


def test_what_the_host_had_when_a_message_came_is_in_the_sandbox_before_its_turn(door, tmp_path):  # noqa: F811
    """The door names its folders' tags with each inbound change; the runner takes what changed
    before the change applies (no wait for its next look at the files)."""
    group = door.settings.groups_dir / "andy"
    group.mkdir(parents=True)
    (group / "gone.md").write_text("here at the start")
    path, sandbox = sandbox_of(door, tmp_path, "s1")
    (group / "brief.md").write_text("read me first")  # the host (or a local sandbox) wrote it
    (group / "gone.md").unlink()
    store.write_message(path, content={"text": "see the brief", "sender": "Owner"}, target=Target("telegram", "111"))
    assert sandbox.pull(wait=0)
    assert tree(sandbox.trees["group"]) == {"brief.md": b"read me first"}
    assert sandbox.pull(wait=0) is False  # nothing more, and no file asked for again


def test_a_pull_takes_the_hosts_changes_and_keeps_unsent_ones():
    sig = (1, 1)
    fetch, remove = plan_pull(host={"a": "new", "b": "same", "c": "new", "e": "new"},
                              known={"a": "old", "b": "same", "c": "old", "d": "old", "f": "old"},
                              local={"a": sig, "b": sig, "c": (2, 2), "d": sig, "f": (2, 2)},
                              sent={"a": sig, "b": sig, "c": sig, "d": sig, "f": sig})
    # a: changed on the host only; c: changed both sides (ours goes up, the host settles it);
    # d: removed on the host; e: new there; f: removed there but changed here (ours goes up)
    assert (fetch, remove) == (["a", "e"], ["d"])


def test_who_wrote_a_version_is_forgotten_after_30_days_and_a_lost_write_is_still_kept_aside(door, tmp_path):  # noqa: F811
    """files.db kept every name ever written through the door; past 30 days its record goes, and a
    version overwritten unseen is still kept beside the winner (only no session is told)."""
    group, path_a, a, _path_b, b = two_sandboxes(door, tmp_path, plan_md="v0")
    (a.trees["group"] / "plan.md").write_text("from A")
    a.sync_files()
    files = door.channel.files
    assert files.prune(now=time.time() + 29 * 86400) == 0
    assert files.prune(now=time.time() + 31 * 86400) == 1
    (b.trees["group"] / "plan.md").write_text("from B")  # over v0: B never saw A's
    b.sync_files()
    assert (group / "plan.md").read_text() == "from B"
    [kept] = [p for p in group.iterdir() if ".conflict-" in p.name]
    assert kept.name.startswith("plan.md.conflict-local-") and kept.read_text() == "from A"
    assert notes(path_a) == []
