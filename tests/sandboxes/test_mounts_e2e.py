"""Extra mounts in a real sandbox (both runtimes): declared with the CLI, validated at every start,
read-only enforced by the runtime, a refused mount keeps the sandbox from starting and says why."""
import json
import os

import pytest

from fakes.model_api import Reply
from tests.web.test_chat_e2e import e2e, runtime_name  # noqa: F401  (fixtures)


@pytest.fixture
def vault(e2e, tmp_path):  # noqa: F811
    run, model = e2e
    root = tmp_path / "notes"
    (root / "vault").mkdir(parents=True)
    (root / "vault" / "note.txt").write_text("buy milk")
    allowlist = tmp_path / "mount-allowlist.json"  # make_settings points NANOCLAW_MOUNT_ALLOWLIST here
    allowlist.write_text(json.dumps({"allowedRoots": [{"path": str(root), "allowReadWrite": True}]}))
    return run, model, root, allowlist


def bash_turn(model, command):
    model.script = [Reply.call("Bash", command=command), Reply.say("ok")]


def tool_output(model):
    return " ".join(r.text for r in model.model_calls()[-1].turn_tool_results())


def test_read_only_mount_is_readable_not_writable(vault):
    run, model, root, _ = vault
    assert run("mount", "add", "andy", str(root / "vault")).exit_code == 0
    bash_turn(model, "cat /workspace/extra/vault/note.txt; touch /workspace/extra/vault/new 2>&1 || echo WRITE-REFUSED")
    result = run("chat", "andy", "read my note", "--timeout", "120")
    assert result.exit_code == 0, result.output
    out = tool_output(model)
    assert "buy milk" in out and "WRITE-REFUSED" in out
    assert not (root / "vault" / "new").exists()


def test_read_write_mount_when_both_sides_agree(vault, runtime_name):  # noqa: F811
    run, model, root, _ = vault
    if runtime_name == "docker":
        # the agent runs as uid 1000: under Docker a read-write folder must be writable by it (we
        # never chown a user's own folder for them); under bwrap it writes as the host's user
        os.chown(root / "vault", 1000, 1000)
    assert run("mount", "add", "andy", str(root / "vault"), "--rw").exit_code == 0
    bash_turn(model, "echo done > /workspace/extra/vault/written && echo WROTE")
    assert run("chat", "andy", "write it", "--timeout", "120").exit_code == 0
    assert (root / "vault" / "written").read_text().strip() == "done", tool_output(model)


def test_allowlist_change_refuses_the_next_start(vault):
    run, model, root, allowlist = vault
    assert run("mount", "add", "andy", str(root / "vault")).exit_code == 0
    allowlist.write_text(json.dumps({"allowedRoots": []}))  # no restart: the next start re-validates
    result = run("chat", "andy", "hi", "--timeout", "60")
    assert result.exit_code == 1
    assert "could not start the sandbox" in result.output and "vault" in result.output
    assert model.model_calls() == []
