"""The mount allowlist for extra mounts (issue 8): what may be mounted, read-only or read-write."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nanoclaw.mounts import (
    DEFAULT_BLOCKED_PATTERNS, Allowlist, AllowlistError, ApprovedMount, MountRefused, MountRequest,
    current_allowlist, validate_mount, validate_mounts,
)


@pytest.fixture
def home(tmp_path):
    """A fake layout: an allowed RO root, an allowed RW root, something outside both, and
    the allowlist file beside them (as ~/.config/nanoclaw would be)."""
    (tmp_path / "ro" / "docs").mkdir(parents=True)
    (tmp_path / "rw" / "code").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "config").mkdir()
    return tmp_path


def write_allowlist(home: Path, roots=None, blocked=None, raw: str | None = None) -> Path:
    path = home / "config" / "mount-allowlist.json"
    if raw is None:
        data = {"allowedRoots": roots if roots is not None else [
            {"path": str(home / "ro"), "allowReadWrite": False, "description": "read-only docs"},
            {"path": str(home / "rw"), "allowReadWrite": True, "description": "code"},
        ]}
        if blocked is not None:
            data["blockedPatterns"] = blocked
        raw = json.dumps(data)
    path.write_text(raw)
    return path


def refused(request: MountRequest, allowlist_path: Path) -> str:
    with pytest.raises(MountRefused) as info:
        validate_mounts([request], allowlist_path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_allowed_read_only_mount(home):
    mounts = validate_mounts([MountRequest(str(home / "ro" / "docs"))], write_allowlist(home))
    assert mounts == [ApprovedMount(host_path=(home / "ro" / "docs").resolve(), name="docs", readonly=True)]


def test_explicit_name_and_tilde_expansion(home, monkeypatch):
    monkeypatch.setenv("HOME", str(home))
    allowlist = write_allowlist(home, roots=[{"path": "~/ro"}])
    [mount] = validate_mounts([MountRequest("~/ro/docs/", name="papers")], allowlist)
    assert (mount.host_path, mount.name, mount.readonly) == ((home / "ro" / "docs").resolve(), "papers", True)


def test_read_write_when_request_and_root_agree(home):
    [mount] = validate_mounts([MountRequest(str(home / "rw" / "code"), readwrite=True)], write_allowlist(home))
    assert mount.readonly is False


def test_read_only_request_on_read_write_root_stays_read_only(home):
    [mount] = validate_mounts([MountRequest(str(home / "rw" / "code"))], write_allowlist(home))
    assert mount.readonly is True


def test_read_write_request_on_read_only_root_is_refused_with_the_reason(home):
    message = refused(MountRequest(str(home / "ro" / "docs"), readwrite=True), write_allowlist(home))
    assert "read-write" in message and "allowReadWrite" in message and str(home / "ro") in message
    assert "mount it read-only" in message


def test_most_specific_root_decides_read_write(home):
    allowlist = write_allowlist(home, roots=[
        {"path": str(home), "allowReadWrite": True},
        {"path": str(home / "ro"), "allowReadWrite": False},
    ])
    assert "read-only" in refused(MountRequest(str(home / "ro" / "docs"), readwrite=True), allowlist)
    [mount] = validate_mounts([MountRequest(str(home / "rw" / "code"), readwrite=True)], allowlist)
    assert not mount.readonly


def test_path_outside_every_root_is_refused(home):
    message = refused(MountRequest(str(home / "outside")), write_allowlist(home))
    assert "not under any allowed root" in message and "allowedRoots" in message


def test_prefix_sibling_is_not_under_the_root(home):
    (home / "ro-evil").mkdir()
    assert "not under any allowed root" in refused(MountRequest(str(home / "ro-evil")), write_allowlist(home))


def test_dotdot_in_host_path_cannot_climb_out(home):
    request = MountRequest(str(home / "ro" / "docs") + "/../../outside", name="x")
    assert "not under any allowed root" in refused(request, write_allowlist(home))


def test_symlink_escaping_an_allowed_root_is_refused(home):
    (home / "ro" / "shortcut").symlink_to(home / "outside")
    message = refused(MountRequest(str(home / "ro" / "shortcut")), write_allowlist(home))
    assert "not under any allowed root" in message and str(home / "outside") in message


def test_symlink_inside_root_to_credentials_is_refused(home):
    (home / "outside" / ".ssh").mkdir()
    (home / "ro" / "notes").symlink_to(home / "outside" / ".ssh")
    assert "'.ssh'" in refused(MountRequest(str(home / "ro" / "notes")), write_allowlist(home))


def test_symlinked_root_still_admits_its_real_contents(home):
    (home / "link-to-ro").symlink_to(home / "ro")
    allowlist = write_allowlist(home, roots=[{"path": str(home / "link-to-ro")}])
    [mount] = validate_mounts([MountRequest(str(home / "ro" / "docs"))], allowlist)
    assert mount.host_path == (home / "ro" / "docs").resolve()


def test_the_mount_is_the_resolved_target_not_the_link(home):
    (home / "ro" / "alias").symlink_to(home / "ro" / "docs")
    [mount] = validate_mounts([MountRequest(str(home / "ro" / "alias"))], write_allowlist(home))
    assert mount.host_path == (home / "ro" / "docs").resolve() and mount.name == "alias"


def test_missing_host_path_is_refused(home):
    assert "does not exist" in refused(MountRequest(str(home / "ro" / "nope")), write_allowlist(home))


def test_relative_host_path_is_refused(home):
    assert "absolute" in refused(MountRequest("ro/docs"), write_allowlist(home))


@pytest.mark.parametrize("pattern", DEFAULT_BLOCKED_PATTERNS, ids=range(len(DEFAULT_BLOCKED_PATTERNS)))
def test_each_default_blocked_pattern_is_refused(home, pattern):
    allowlist = write_allowlist(home)
    # Control: a harmless sibling in the same root is fine, so the refusal is the pattern's doing.
    (home / "ro" / "plain").mkdir()
    validate_mounts([MountRequest(str(home / "ro" / "plain"))], allowlist)
    (home / "ro" / pattern).mkdir()
    message = refused(MountRequest(str(home / "ro" / pattern), name="x"), allowlist)
    assert f"blocked pattern {pattern!r}" in message


def test_seventeen_default_patterns():
    assert len(DEFAULT_BLOCKED_PATTERNS) == 17


@pytest.mark.parametrize("relative", [".ssh/keys", ".env.local", "aws-credentials", "Project/ID_RSA.pub"])
def test_blocked_pattern_on_any_component_and_within_names(home, relative):
    (home / "rw" / relative).mkdir(parents=True)
    assert "blocked pattern" in refused(MountRequest(str(home / "rw" / relative), name="x"), write_allowlist(home))


def test_custom_blocked_pattern_from_the_file(home):
    (home / "ro" / "taxes-2024").mkdir()
    allowlist = write_allowlist(home, blocked=["taxes"])
    assert "blocked pattern 'taxes'" in refused(MountRequest(str(home / "ro" / "taxes-2024")), allowlist)
    assert "taxes" in Allowlist.load(allowlist).blocked_patterns
    assert set(DEFAULT_BLOCKED_PATTERNS) <= set(Allowlist.load(allowlist).blocked_patterns)


@pytest.mark.parametrize("name, why", [
    ("..", "'.'"), ("../escape", "'..'"), ("a..b", "'..'"), ("a/b", "'/'"), ("/abs", "absolute"),
    (" spaced", "spaces"), ("bad\nname", "control"),
])
def test_bad_mount_names_are_refused(home, name, why):
    message = refused(MountRequest(str(home / "ro" / "docs"), name=name), write_allowlist(home))
    assert why in message and "/workspace/extra/<name>" in message


def test_root_directory_has_no_default_name(home):
    assert "empty" in refused(MountRequest("/"), write_allowlist(home))


def test_duplicate_names_are_refused(home):
    requests = [MountRequest(str(home / "ro" / "docs")), MountRequest(str(home / "rw" / "code"), name="docs")]
    with pytest.raises(MountRefused, match="two mounts are named 'docs'"):
        validate_mounts(requests, write_allowlist(home))


def test_mount_containing_the_allowlist_is_refused(home):
    allowlist = write_allowlist(home, roots=[{"path": str(home), "allowReadWrite": True}])
    assert "mount allowlist" in refused(MountRequest(str(home / "config"), readwrite=True), allowlist)
    assert "mount allowlist" in refused(MountRequest(str(home)), allowlist)
    validate_mounts([MountRequest(str(home / "rw"))], allowlist)  # a sibling is fine


def test_missing_allowlist_refuses_everything_and_says_how_to_create_it(home):
    message = refused(MountRequest(str(home / "ro" / "docs")), home / "config" / "mount-allowlist.json")
    assert "does not exist" in message and "create it" in message and '"allowedRoots"' in message


def test_no_requests_need_no_allowlist(home):
    assert validate_mounts([], home / "config" / "missing.json") == []


@pytest.mark.parametrize("raw, why", [
    ("{not json", "not JSON"),
    ("[]", "top level"),
    ("{}", "allowedRoots"),
    ('{"allowedRoots": [{"allowReadWrite": true}]}', "path"),
    ('{"allowedRoots": [{"path": "relative/dir"}]}', "absolute"),
    ('{"allowedRoots": [{"path": "/tmp", "allowReadWrite": "yes"}]}', "true or false"),
    ('{"allowedRoots": [], "blockedPatterns": "x"}', "blockedPatterns"),
])
def test_malformed_allowlist_refuses_everything_with_a_clear_message(home, raw, why):
    message = refused(MountRequest(str(home / "ro" / "docs")), write_allowlist(home, raw=raw))
    assert "invalid" in message and why in message and "fix it" in message


def test_empty_roots_refuse_everything(home):
    message = refused(MountRequest(str(home / "ro" / "docs")), write_allowlist(home, roots=[]))
    assert "allowed: none" in message


def test_validate_mount_is_pure_given_the_allowlist(home):
    allowlist = Allowlist.parse(json.dumps({"allowedRoots": [{"path": str(home / "ro")}]}))
    assert validate_mount(MountRequest(str(home / "ro" / "docs")), allowlist).readonly
    with pytest.raises(MountRefused):
        validate_mount(MountRequest(str(home / "rw" / "code")), allowlist)


def test_a_changed_file_takes_effect_without_a_restart(home):
    path = write_allowlist(home)
    request = MountRequest(str(home / "ro" / "docs"), readwrite=True)
    refused(request, path)
    before = os.stat(path)
    # Same size, same inode, same mtime: only the bytes differ (false -> true with a pad).
    text = path.read_text().replace('"allowReadWrite": false', '"allowReadWrite": true ')
    with open(path, "r+") as f:
        f.write(text)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_ino, after.st_mtime_ns) == (before.st_size, before.st_ino, before.st_mtime_ns)
    [mount] = validate_mounts([request], path)
    assert not mount.readonly
    # And a removed root is gone on the next call.
    write_allowlist(home, roots=[{"path": str(home / "rw")}])
    assert "not under any allowed root" in refused(request, path)


def test_unchanged_file_is_served_from_the_cache(home):
    path = write_allowlist(home)
    assert current_allowlist(path) is current_allowlist(path)


def test_read_error_is_not_cached(home):
    path = home / "config" / "mount-allowlist.json"
    path.mkdir()  # unreadable as a file (running as root, chmod would not stop a read)
    with pytest.raises(AllowlistError, match="cannot be read"):
        current_allowlist(path)
    path.rmdir()
    write_allowlist(home)
    assert validate_mounts([MountRequest(str(home / "ro" / "docs"))], path)


def test_error_after_a_good_read_is_not_hidden_by_the_cache(home):
    path = write_allowlist(home)
    request = MountRequest(str(home / "ro" / "docs"))
    assert validate_mounts([request], path)
    path.write_text("{broken")
    assert "invalid" in refused(request, path)
    path.unlink()
    assert "does not exist" in refused(request, path)
    write_allowlist(home)
    assert validate_mounts([request], path)


def test_symlink_swapped_after_declaration_is_caught_at_the_next_start(home):
    path = write_allowlist(home)
    link = home / "ro" / "data"
    link.symlink_to(home / "ro" / "docs")
    request = MountRequest(str(link))
    assert validate_mounts([request], path)  # at declaration
    link.unlink()
    link.symlink_to(home / "outside")
    assert "not under any allowed root" in refused(request, path)  # at sandbox start
