"""Backups and restores against an agent that plays with links in its own folders (issue 29, holes 2
and 3).

- A real agent in a real sandbox keeps swapping a folder in its home with a link to the host's data
  folder (an atomic exchange, in a loop) while backups are taken: every backup succeeds and none
  holds a byte of the host's files.
- `restore --force` over a session whose agent left `home/x` as a link to the session's host part
  writes nothing through it: the host's inbound.db is the archive's, the agent's file lands under
  its own `agent/`, and an archive with a member outside its shape changes nothing at all.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from nanoclaw.lifecycle.backup import BackupError
from nanoclaw.lifecycle.restore import placement
from nanoclaw.models import Session
from nanoclaw.sessions import store
from tests.fakes.model_api import Reply
from tests.tg_flow import OLIVIA_AND_ANDY, message, person, sandbox_service, texts

OWNER = person(111, "Olivia")

RACE = r'''
import ctypes, os, subprocess, sys, time
H = "/workspace/session/home"
os.makedirs(H + "/cache/deeper", exist_ok=True)
for name in ["secret_key", "nanoclaw.db", "deeper/secret_key"] + ["note%%d.txt" %% i for i in range(30)]:
    with open(H + "/cache/" + name, "w") as f:
        f.write("mine")
os.symlink("%(target)s", H + "/cache-link")
racer = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
H = "/workspace/session/home"
open(H + "/racing", "w").close()
end = time.time() + 150
while time.time() < end and not os.path.exists(H + "/stop"):
    libc.renameat2(-100, (H + "/cache").encode(), -100, (H + "/cache-link").encode(), 2)
"""
subprocess.Popen([sys.executable, "-c", racer], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print("RACE STARTED")
'''


QUIET_CACHE = {f"cache/{name}" for name in ["secret_key", "nanoclaw.db", "deeper/secret_key"]
               + [f"note{i}.txt" for i in range(30)]}


def host_bytes(data_dir: Path) -> list[bytes]:
    """What must never be in an archive of an agent's folder: the host's own files."""
    return [(data_dir / "secret_key").read_bytes().strip()]


def test_a_backup_taken_while_an_agent_swaps_links_holds_no_host_file(make_settings, sqlite_url, tmp_path):
    def brain(req):
        if "start the cache" in req.current_prompt():
            if not req.turn_tool_results():
                return Reply.call("Bash", command="python3 - <<'EOF'\n" + RACE % {"target": target} + "EOF\n")
            return Reply.say("Cache started.")
        return Reply.say("?")

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        target = str(svc.settings.data_dir)
        for args in OLIVIA_AND_ANDY:
            svc.cli(*args)
        svc.cli("backup", str(tmp_path / "first.tar.gz"))  # makes data/secret_key exist, as a running service has
        svc.post(message(111, OWNER, "please start the cache"))
        svc.wait(lambda: "Cache started." in texts(svc.tg, 111), what="the agent's answer")
        home = store.agent_part(store.session_path(svc.settings.sessions_dir, "andy", Session.get().id)) / "home"
        svc.wait(lambda: (home / "racing").exists(), what="the race to start")
        secrets = host_bytes(svc.settings.data_dir)
        met = taken = 0  # backups that met the swap (a quiet folder gives home/cache/ only, whole)
        try:
            while taken < 6 or (not met and taken < 60):
                archive = tmp_path / f"during-{taken}.tar.gz"
                out = svc.cli("backup", str(archive)).output  # never fails because of the agent
                assert "wrote" in out
                taken += 1
                with tarfile.open(archive) as tar:
                    cached = set()
                    for member in tar.getmembers():
                        if member.isfile() and "/agent/" in member.name:
                            data = tar.extractfile(member).read()
                            assert not any(s in data for s in secrets), member.name
                            assert member.name.rsplit("/", 1)[-1] != "nanoclaw.db" or data == b"mine", member.name
                            if "/home/cache" in member.name:
                                cached.add(member.name.split("/home/", 1)[1])
                    skipped = json.loads(tar.extractfile("manifest.json").read()).get("skipped")
                met += bool(skipped) or cached != QUIET_CACHE
            assert met, f"none of {taken} backups met the agent's swap: the test proved nothing"
            print(f"{met} of {taken} backups met the swap")
        finally:
            (home / "stop").touch()


# --- restore --------------------------------------------------------------------------------------

def archive_of(path: Path, members: dict[str, bytes], schema_version: int = 1) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"manifest.json": json.dumps({"format": 1, "schema_version": schema_version}).encode(),
                           **members}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def tree(root: Path) -> dict[str, bytes | str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else (p.read_bytes() if p.is_file() else "dir")
    return out


@pytest.fixture
def cli(sqlite_app):
    runner = sqlite_app.test_cli_runner()
    return lambda *args: runner.invoke(args=["nanoclaw", *args])


@pytest.fixture
def install(sqlite_app, cli):
    """A stopped install with one session whose agent left home/x as a link to its host part."""
    settings = sqlite_app.config["NANOCLAW"]
    assert cli("agent", "create", "Andy").exit_code == 0
    session = settings.sessions_dir / "andy" / "s1"
    store.prepare(session, store.Target("telegram", "42"))
    (session / "agent" / "home").mkdir(parents=True, exist_ok=True)
    os.symlink("../../host", session / "agent" / "home" / "x")
    return settings, session


def test_restore_force_writes_nothing_through_a_link_on_disk(install, cli, tmp_path):
    settings, session = install
    host_db = (session / "host" / "inbound.db").read_bytes()
    archive = archive_of(tmp_path / "old.tar.gz", {
        "sessions/andy/s1/host/inbound.db": host_db,
        "sessions/andy/s1/agent/home/x/inbound.db": b"the agent's forged routing",
        "groups/andy/CLAUDE.md": b"# Andy\n"})
    result = cli("restore", str(archive), "--force")
    assert result.exit_code == 0, result.output
    assert (session / "host" / "inbound.db").read_bytes() == host_db
    assert (session / "agent" / "home" / "x" / "inbound.db").read_bytes() == b"the agent's forged routing"
    assert not (session / "agent" / "home" / "x").is_symlink()
    assert "kept in" in result.output  # what was there is moved aside, not lost
    aside = Path(result.output.split("kept in ", 1)[1].split(";", 1)[0])
    assert (aside / "sessions-sessions" / "andy" / "s1" / "agent" / "home" / "x").is_symlink()


@pytest.mark.parametrize("bad", ["sessions/andy/s1/../../../../etc/cron.d/x", "sessions/andy/s1/other.db",
                                 "sessions/andy/s1/host/routing.db", "sessions/../secret_key", "/etc/passwd",
                                 "groups/andy/../../secret_key"])
def test_an_archive_with_a_member_outside_its_shape_changes_nothing(install, cli, tmp_path, bad):
    settings, session = install
    before = (tree(settings.data_dir), tree(settings.groups_dir))
    archive = archive_of(tmp_path / "bad.tar.gz", {"groups/andy/CLAUDE.md": b"new", "sessions/andy/s1/agent/a": b"1",
                                                   bad: b"x", "sessions/andy/s1/agent/z": b"2"})
    result = cli("restore", str(archive), "--force")
    assert result.exit_code == 2 and "refusing it" in result.output and "Traceback" not in result.output
    assert (tree(settings.data_dir), tree(settings.groups_dir)) == before


def test_placement_keeps_a_sessions_files_in_its_own_parts():
    assert placement("sessions/andy/s1/agent/home/.claude/x.jsonl") == ("sessions", ("andy", "s1", "agent", "home",
                                                                                       ".claude", "x.jsonl"))
    assert placement("sessions/andy/s1/host/inbox/m1/photo.jpg")[0] == "sessions"
    assert placement("secrets/env") is None and placement("future/thing") is None
    for bad in ("sessions/andy/s1/host/outbound.db", "sessions/global x/s1/agent/a", "sessions/andy/s 1/agent/a",
                "sessions/andy/s1/agent/../host/inbound.db", "db/../x"):
        with pytest.raises(BackupError):
            placement(bad)
