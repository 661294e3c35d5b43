"""`mount add|list|remove`: validated against the allowlist, read-only by default, warned when rw."""
import json

import pytest

from nanoclaw.models import AgentGroup


@pytest.fixture
def allowed(app, tmp_path):
    root = tmp_path / "notes"
    (root / "vault").mkdir(parents=True)
    (root / ".ssh").mkdir()
    app.config["NANOCLAW"].mount_allowlist.write_text(json.dumps(
        {"allowedRoots": [{"path": str(root), "allowReadWrite": True, "description": "notes"}]}))
    return root


def test_add_list_remove(cli, allowed):
    cli("agent", "create", "Andy")
    result = cli("mount", "add", "andy", str(allowed / "vault"))
    assert result.exit_code == 0, result.output
    assert "/workspace/extra/vault (read-only)" in result.output
    assert AgentGroup.get().container_config["mounts"] == [
        {"host_path": str(allowed / "vault"), "name": "vault", "readwrite": False}]
    listing = cli("mount", "list").output.splitlines()
    assert listing[1].split() == ["andy", "vault", "ro", str(allowed / "vault")]
    assert cli("mount", "remove", "andy", "vault").exit_code == 0
    assert AgentGroup.get().container_config["mounts"] == []


def test_read_write_prints_a_warning(cli, allowed):
    cli("agent", "create", "Andy")
    result = cli("mount", "add", "andy", str(allowed / "vault"), "--rw", "--name", "notes")
    assert result.exit_code == 0
    assert "warning: read-write: the agent can create, change and delete any file" in result.output


def test_refusals_are_one_line(cli, allowed, tmp_path):
    cli("agent", "create", "Andy")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for args in (["mount", "add", "andy", str(outside)],
                 ["mount", "add", "andy", str(allowed / ".ssh")],
                 ["mount", "add", "andy", str(allowed / "vault"), "--name", "../x"],
                 ["mount", "add", "ghost", str(allowed / "vault")],
                 ["mount", "remove", "andy", "nothing"]):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error: ")
    assert AgentGroup.get().container_config.get("mounts", []) == []


def test_missing_allowlist_says_how_to_create_it(cli, app):
    cli("agent", "create", "Andy")
    result = cli("mount", "add", "andy", "/tmp")
    assert result.exit_code == 2
    assert "allowedRoots" in result.output


# --- NanoClaw's own files are never mounted, whatever the allowlist says (issue 15, hole 5) ----

@pytest.fixture
def everything_allowed(app, tmp_path):
    """An allowlist that allows the whole machine: only the protection itself can refuse."""
    app.config["NANOCLAW"].mount_allowlist.write_text(json.dumps(
        {"allowedRoots": [{"path": "/", "allowReadWrite": True, "description": "all"}], "blockedPatterns": []}))
    return app.config["NANOCLAW"]


def test_nanoclaw_itself_cannot_be_mounted(cli, everything_allowed, tmp_path):
    from nanoclaw.config import PROJECT_ROOT
    settings = everything_allowed
    cli("agent", "create", "Andy")
    cli("agent", "create", "Bea")
    (settings.data_dir / "sessions").mkdir(parents=True, exist_ok=True)
    (tmp_path / "innocent-link").symlink_to(settings.data_dir / "sessions")
    cases = [(PROJECT_ROOT, "NanoClaw's own folder"), (PROJECT_ROOT / "nanoclaw", "NanoClaw's own folder"),
             (settings.data_dir, "NanoClaw's data folder"), (tmp_path / "innocent-link", "NanoClaw's data folder"),
             (tmp_path, "NanoClaw's data folder"),  # a parent of the data folder exposes it too
             (settings.groups_dir / "bea", "the agents' folders")]
    for path, rule in cases:
        result = cli("mount", "add", "andy", str(path))
        assert result.exit_code == 2, (path, result.output)
        assert result.output.startswith("error: host path") and rule in result.output, (path, result.output)
        assert len(result.output.strip().splitlines()) == 1
    assert AgentGroup.get(AgentGroup.folder == "andy").container_config.get("mounts", []) == []


def test_a_mount_declared_before_is_refused_at_sandbox_start(app, everything_allowed):
    from nanoclaw.sandboxes.manager import mounts_for
    from nanoclaw.mounts import MountRefused
    settings = everything_allowed
    app.test_cli_runner().invoke(args=["nanoclaw", "agent", "create", "Andy"])
    AgentGroup.update(container_config={"mounts": [{"host_path": str(settings.data_dir), "name": "data",
                                                    "readwrite": False}]}).execute()
    with pytest.raises(MountRefused, match="would expose NanoClaw's data folder"):
        mounts_for(settings)("andy")
