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
