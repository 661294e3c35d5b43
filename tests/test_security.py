"""The v1 folder-name and path-containment rules."""
import os

import pytest

from nanoclaw.security import UnsafePath, contained, folder_problem, slugify, validate_folder


@pytest.mark.parametrize("name", ["andy", "Andy", "a", "9lives", "my-agent_2", "x" * 64])
def test_valid_folders(name):
    assert validate_folder(name) == name


@pytest.mark.parametrize("name, why", [
    ("", "empty"),
    ("global", "reserved"),
    ("Global", "reserved"),
    ("..", "'..'"),
    ("a/b", "'/'"),
    ("a\\b", "'\\\\'"),
    ("../etc", "'..'"),
    ("-dash", "start with a letter or digit"),
    ("_under", "start with a letter or digit"),
    ("x" * 65, "at most 64"),
    ("has space", "letters, digits"),
    ("dot.name", "letters, digits"),
    ("ünïcode", "letters, digits"),
])
def test_invalid_folders(name, why):
    problem = folder_problem(name)
    assert problem and why.strip("'") in problem
    with pytest.raises(UnsafePath):
        validate_folder(name)


def test_slugify():
    assert slugify("Andy") == "andy"
    assert slugify("My Helpful Agent!") == "my-helpful-agent"
    assert slugify("../../etc") == "etc"
    assert slugify("!!!") == ""


def test_contained_paths(tmp_path):
    base = tmp_path / "base"
    (base / "sub").mkdir(parents=True)
    (base / "sub" / "f.txt").write_text("x")
    assert contained(base, "sub/f.txt") == (base / "sub" / "f.txt").resolve()
    assert contained(base, base / "sub") == (base / "sub").resolve()
    assert contained(base, ".") == base.resolve()
    for bad in ["../x", "sub/../../x", "/etc/passwd", str(tmp_path)]:
        with pytest.raises(UnsafePath):
            contained(base, bad)


def test_symlink_out_of_base_is_refused(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    outside = tmp_path / "secret.txt"
    outside.write_text("s")
    os.symlink(outside, base / "link")
    with pytest.raises(UnsafePath):
        contained(base, "link")


def test_sibling_with_common_prefix_is_refused(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base2").mkdir()
    with pytest.raises(UnsafePath):
        contained(tmp_path / "base", tmp_path / "base2")


# --- walking a tree the agent can change (issue 29) --------------------------------------------

def test_walk_tree_never_follows_a_link_at_any_level(tmp_path):
    from nanoclaw.security import walk_tree
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("key")
    agent = tmp_path / "agent"
    (agent / "a").mkdir(parents=True)
    (agent / "a" / "mine").write_text("mine")
    (agent / "link").symlink_to(host)
    (agent / "a" / "file-link").symlink_to(host / "secret")
    seen = {e.rel for e in walk_tree(agent)}
    assert seen == {"", "a", "a/mine"}
    assert list(walk_tree(agent / "link")) == []  # a root that is a link yields nothing


def test_a_folder_swapped_for_a_link_mid_walk_is_walked_as_the_folder_that_was_opened(tmp_path):
    """The classic race, made deterministic: right after the walk opened a folder, the agent moves it
    away and puts a link to the host's files in its place. The walk goes on in what it opened."""
    from nanoclaw.security import walk_tree
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("key")
    agent = tmp_path / "agent"
    (agent / "cache").mkdir(parents=True)
    (agent / "cache" / "note").write_text("mine")
    read = {}
    for entry in walk_tree(agent):
        if entry.rel == "cache":
            (agent / "cache").rename(agent / "moved")
            (agent / "cache").symlink_to(host)
        elif not entry.is_dir:
            read[entry.rel] = os.pread(entry.fd, 100, 0)
    assert read == {"cache/note": b"mine"}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_chown_tree_never_changes_what_a_link_points_at(tmp_path):
    from nanoclaw.runtime.access import chown_tree
    host = tmp_path / "host-file"
    host.write_text("the host's")
    agent = tmp_path / "agent"
    (agent / "sub").mkdir(parents=True)
    (agent / "sub" / "f").write_text("x")
    (agent / "sub" / "link").symlink_to(host)
    (agent / "dirlink").symlink_to(tmp_path)
    chown_tree(agent, 1000, 1000)
    assert (agent / "sub" / "f").stat().st_uid == 1000 and (agent / "sub").stat().st_uid == 1000
    assert host.stat().st_uid == 0 and tmp_path.stat().st_uid == 0


def test_the_host_never_writes_an_agents_file_through_a_link(tmp_path):
    from nanoclaw.security import write_text_nofollow
    host = tmp_path / "host-file"
    host.write_text("the host's")
    group = tmp_path / "group"
    group.mkdir()
    (group / "CLAUDE.md").symlink_to(host)
    with pytest.raises(OSError):
        write_text_nofollow(group, "CLAUDE.md", "# Andy")
    assert host.read_text() == "the host's"
    (tmp_path / "group-link").symlink_to(group)
    with pytest.raises(OSError):
        write_text_nofollow(tmp_path / "group-link", "new.md", "x")
    write_text_nofollow(group, "notes.md", "ok")
    assert (group / "notes.md").read_text() == "ok"
