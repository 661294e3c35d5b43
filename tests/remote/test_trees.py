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
