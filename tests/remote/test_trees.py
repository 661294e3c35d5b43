"""Files a remote sandbox uploads land only inside their folder, as plain files, within limits."""
from __future__ import annotations

import io
import os
import tarfile

import pytest
from hypothesis import given, strategies as st

from nanoclaw.remote import trees


def tar_of(*members) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def file(name, data=b"x"):
    return (name, data, tarfile.REGTYPE)


def test_plain_files_land_in_their_folders_and_replace_what_was_there(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "CLAUDE.md").write_text("old")
    done = trees.unpack(tmp_path / "g", tar_of(file("CLAUDE.md", b"new"), file("notes/a/b.txt", b"deep")))
    assert (done.files, done.bytes) == (2, 7)
    assert (tmp_path / "g" / "CLAUDE.md").read_text() == "new"
    assert (tmp_path / "g" / "notes" / "a" / "b.txt").read_text() == "deep"
    assert not [p for p in (tmp_path / "g").rglob("*.part")]


@pytest.mark.parametrize("name", ["/etc/passwd", "../outside", "a/../../outside", "", "a\\..\\b"])
def test_a_name_leaving_the_folder_is_refused(tmp_path, name):
    with pytest.raises(trees.BadTree):
        trees.unpack(tmp_path / "g", tar_of(file(name)))
    assert not (tmp_path / "outside").exists()


def test_links_and_devices_are_passed_over(tmp_path):
    done = trees.unpack(tmp_path / "g", tar_of(("link", b"/etc/passwd", tarfile.SYMTYPE),
                                               ("dev", b"", tarfile.CHRTYPE), file("ok")))
    assert done.files == 1 and sorted(done.skipped) == ["dev", "link"]
    assert sorted(os.listdir(tmp_path / "g")) == ["ok"]


def test_a_link_in_the_hosts_folder_is_never_written_through(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "g").mkdir()
    os.symlink(outside, tmp_path / "g" / "notes")      # planted by the agent earlier (e.g. a local sandbox)
    os.symlink(outside / "x", tmp_path / "g" / "file")
    done = trees.unpack(tmp_path / "g", tar_of(file("notes/secret"), file("file", b"replaced")))
    assert os.listdir(outside) == []
    assert done.skipped == ["notes/secret"]
    assert not os.path.islink(tmp_path / "g" / "file")  # the link itself was replaced, not followed


def test_limits(tmp_path, monkeypatch):
    monkeypatch.setattr(trees, "MAX_FILE", 10)
    with pytest.raises(trees.BadTree, match="limits"):
        trees.unpack(tmp_path / "g", tar_of(file("big", b"y" * 11)))
    with pytest.raises(trees.BadTree, match="limits"):
        trees.unpack(tmp_path / "h", tar_of(file("a", b"1234"), file("b", b"1234")), max_total=6)
    assert (tmp_path / "h" / "a").read_bytes() == b"1234" and not (tmp_path / "h" / "b").exists()


class Counting(io.RawIOBase):
    """A tar stream that says how many bytes were read of it: a header 'of 1 GiB' then endless zeros."""

    def __init__(self, head: bytes):
        self.head, self.read_bytes = head, 0

    def readable(self):
        return True

    def readinto(self, buffer):
        n = len(buffer)
        chunk = self.head[self.read_bytes:self.read_bytes + n]
        chunk += b"\0" * (n - len(chunk))
        buffer[:n] = chunk
        self.read_bytes += n
        return n


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                                  tarfile.XGLTYPE])
def test_an_extended_header_is_size_checked_before_it_is_read(tmp_path, kind):
    """tarfile reads a long-name or pax header whole into memory: one that says it is 1 GiB is refused
    from its header block, before its bytes are read."""
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = kind, 1 << 30
    stream = Counting(info.tobuf(format=tarfile.GNU_FORMAT))
    with pytest.raises(trees.BadTree, match="extended header"):
        trees.unpack(tmp_path / "g", stream)
    assert stream.read_bytes < 1 << 20


def test_not_a_tar_is_refused(tmp_path):
    with pytest.raises(trees.BadTree):
        trees.unpack(tmp_path / "g", io.BytesIO(b"hello, this is not a tar archive" * 40))


def test_pack_takes_plain_files_only(tmp_path):
    (tmp_path / "g" / "d").mkdir(parents=True)
    (tmp_path / "g" / "d" / "f").write_text("f")
    os.symlink("/etc/passwd", tmp_path / "g" / "link")
    out = io.BytesIO()
    assert trees.pack(tmp_path / "g", out) == 1
    out.seek(0)
    assert tarfile.open(fileobj=out).getnames() == ["d/f"]


@given(st.text(max_size=80))
def test_member_path_never_leaves(name):
    try:
        parts = trees.member_path(name)
    except trees.BadTree:
        return
    assert parts and ".." not in parts and not name.startswith("/")


# --- files removed in the sandbox ------------------------------------------------------------------

def sha(data: bytes) -> str:
    import hashlib
    return hashlib.sha256(data).hexdigest()


def test_a_removed_file_goes_only_while_the_host_has_the_content_the_sandbox_knew(tmp_path):
    g = tmp_path / "g"
    (g / "notes").mkdir(parents=True)
    (g / "notes" / "old.txt").write_bytes(b"draft")
    (g / "shared.txt").write_bytes(b"changed by the other sandbox since")
    done = trees.remove_known(g, trees.removals({"files": {"notes/old.txt": sha(b"draft"),
                                                             "shared.txt": sha(b"what this sandbox knew"),
                                                             "never/there.txt": sha(b"x")}}))
    assert done.removed == 1 and sorted(done.kept) == ["never/there.txt", "shared.txt"]
    assert not (g / "notes" / "old.txt").exists()
    assert (g / "shared.txt").read_bytes() == b"changed by the other sandbox since"  # nothing of another lost


def test_a_removal_never_goes_through_a_link_or_takes_a_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"keep")
    g = tmp_path / "g"
    g.mkdir()
    (g / "via").symlink_to(outside)
    (g / "link.txt").symlink_to(outside / "secret.txt")
    (g / "folder").mkdir()
    done = trees.remove_known(g, trees.removals({"files": {"via/secret.txt": sha(b"keep"),
                                                             "link.txt": sha(b"keep"), "folder": sha(b"")}}))
    assert done.removed == 0 and len(done.kept) == 3
    assert (outside / "secret.txt").read_bytes() == b"keep" and (g / "link.txt").is_symlink() and (g / "folder").is_dir()


@pytest.mark.parametrize("body", [
    {"files": {"../escape.txt": "0" * 64}}, {"files": {"/etc/passwd": "0" * 64}}, {"files": {"a.txt": "not-a-digest"}},
    {"files": ["a.txt"]}, {"names": {}}, [], {"files": {"a.txt": "A" * 64}},
])
def test_a_malformed_removal_is_refused_whole(body):
    with pytest.raises(trees.BadTree):
        trees.removals(body)


@given(st.dictionaries(st.text(max_size=40), st.text(max_size=70), max_size=5))
def test_removals_either_checks_every_name_or_refuses(files):
    try:
        checked = trees.removals({"files": files})
    except trees.BadTree:
        return
    for name, (*parts, digest) in checked.items():
        assert parts == list(trees.member_path(name)) and len(digest) == 64
