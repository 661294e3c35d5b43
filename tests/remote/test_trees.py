"""Files a remote sandbox uploads land only inside their folder, as plain files, within limits."""
from __future__ import annotations

import io
import os
import tarfile

import pytest
from hypothesis import given, strategies as st

from agent_runner.tree_sync import BASE_KEY, OFFSET_KEY
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


def test_a_removal_over_a_version_the_sandbox_never_saw_wins_and_keeps_that_version_aside(tmp_path):
    g = tmp_path / "g"
    (g / "notes").mkdir(parents=True)
    (g / "notes" / "old.txt").write_bytes(b"draft")
    (g / "shared.txt").write_bytes(b"changed by the other sandbox since")
    owners = {("shared.txt", sha(b"changed by the other sandbox since")): "s2"}
    done = trees.remove_known(g, trees.removals({"files": {"notes/old.txt": sha(b"draft"),
                                                             "shared.txt": sha(b"what this sandbox knew"),
                                                             "never/there.txt": sha(b"x")}}),
                              lambda name, digest: owners.get((name, digest)))
    assert done.removed == 2 and done.kept == ["never/there.txt"]
    assert not (g / "notes" / "old.txt").exists() and not (g / "shared.txt").exists()
    [conflict] = done.conflicts
    assert conflict.name == "shared.txt" and conflict.loser == "s2" and conflict.removed
    assert conflict.kept_as.startswith("shared.txt.conflict-s2-")
    assert (g / conflict.kept_as).read_bytes() == b"changed by the other sandbox since"  # nothing of another lost


def based(name, data, base):
    info = tarfile.TarInfo(name)
    info.size, info.pax_headers = len(data), {BASE_KEY: base}
    return info, data


def tar_based(*members) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def test_the_last_write_wins_and_the_version_it_overwrites_unseen_is_kept_beside_it(tmp_path):
    g = tmp_path / "g"
    g.mkdir()
    (g / "plan.md").write_bytes(b"theirs")        # another session's, over v0 which this one knew
    (g / "same.md").write_bytes(b"v0")            # unchanged since this session knew it
    (g / "both-new.md").write_bytes(b"theirs too")  # made by both, each without seeing the other's
    (g / "agreed.md").write_bytes(b"same result")   # both made the same change: nothing to keep
    (g / "mine.md").write_bytes(b"v0")
    owners = {"plan.md": "s2", "both-new.md": "s2", "agreed.md": "s2"}
    done = trees.unpack(g, tar_based(based("plan.md", b"ours", sha(b"v0")), based("same.md", b"v1", sha(b"v0")),
                                     based("both-new.md", b"ours too", ""),
                                     based("agreed.md", b"same result", sha(b"v0")),
                                     based("gone.md", b"changed here", sha(b"v0"))),
                        owner_of=lambda name, _digest: owners.get(name))
    assert {p.name: p.read_bytes() for p in g.iterdir() if ".conflict-" not in p.name} == {
        "plan.md": b"ours", "same.md": b"v1", "both-new.md": b"ours too", "agreed.md": b"same result",
        "gone.md": b"changed here", "mine.md": b"v0"}
    kept = {c.name: c for c in done.conflicts}
    assert sorted(kept) == ["both-new.md", "gone.md", "plan.md"]
    assert (g / kept["plan.md"].kept_as).read_bytes() == b"theirs" and kept["plan.md"].loser == "s2"
    assert (g / kept["both-new.md"].kept_as).read_bytes() == b"theirs too"
    assert kept["gone.md"].kept_as is None  # removed elsewhere since: the change is back, nothing to keep
    assert done.written[kept["plan.md"].kept_as] == sha(b"theirs") and done.written["plan.md"] == sha(b"ours")


def test_without_a_base_the_upload_simply_replaces(tmp_path):
    g = tmp_path / "g"
    g.mkdir()
    (g / "plan.md").write_bytes(b"theirs")
    done = trees.unpack(g, tar_of(file("plan.md", b"ours")), owner_of=lambda _n, _d: "s2")
    assert not done.conflicts and sorted(os.listdir(g)) == ["plan.md"]


def test_a_conflict_name_stays_a_file_name():
    name = trees.conflict_name("é" * 200 + ".md", "s" * 40, 0)
    assert len(name.encode()) <= trees.MAX_NAME and name.endswith(".conflict-" + "s" * 40 + "-19700101T000000Z")
    assert trees.conflict_name("a.md", None, 0) == "a.md.conflict-local-19700101T000000Z"


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


def test_a_file_that_only_grew_goes_as_its_tail_and_lands_whole(tmp_path):
    """A transcript grows each turn: the upload carries what the turn added, and the host's copy is
    the whole new file; a tail over a copy that is no longer its base is refused for a whole upload."""
    from agent_runner.tree_sync import pack
    here, host = tmp_path / "here", tmp_path / "host"
    (here / "t").mkdir(parents=True)
    (here / "t" / "log.jsonl").write_bytes(b"x" * 100_000)
    sent: dict[str, str] = {}
    trees.unpack(host, io.BytesIO(pack(here, ["t/log.jsonl"], sent, {})), owner_of=lambda _n, _d: None)
    with open(here / "t" / "log.jsonl", "ab") as f:
        f.write(b"one more turn\n")
    body = pack(here, ["t/log.jsonl"], sent, dict(sent), {"t/log.jsonl": 100_000})
    assert len(body) < 5_000  # the tail and the tar's headers, not the 100 kB before it
    done = trees.unpack(host, io.BytesIO(body), owner_of=lambda _n, _d: None)
    assert (host / "t" / "log.jsonl").read_bytes() == (here / "t" / "log.jsonl").read_bytes()
    assert done.written["t/log.jsonl"] == sent["t/log.jsonl"] == sha((here / "t" / "log.jsonl").read_bytes())
    assert not done.conflicts and not done.again

    (host / "t" / "log.jsonl").write_bytes(b"someone else's")  # the base is gone: the tail alone is no file
    with open(here / "t" / "log.jsonl", "ab") as f:
        f.write(b"and another\n")
    done = trees.unpack(host, io.BytesIO(pack(here, ["t/log.jsonl"], {}, dict(sent), {"t/log.jsonl": 100_014})),
                        owner_of=lambda _n, _d: None)
    assert done.again == ["t/log.jsonl"] and (host / "t" / "log.jsonl").read_bytes() == b"someone else's"


def test_a_prefix_that_changed_goes_whole(tmp_path):
    from agent_runner.tree_sync import pack
    (tmp_path / "a.txt").write_bytes(b"abcdef")
    sent: dict[str, str] = {}
    pack(tmp_path, ["a.txt"], sent, {})
    (tmp_path / "a.txt").write_bytes(b"Xbcdefgh")
    with tarfile.open(fileobj=io.BytesIO(pack(tmp_path, ["a.txt"], {}, dict(sent), {"a.txt": 6}))) as tar:
        [member] = tar.getmembers()
    assert member.size == 8 and OFFSET_KEY not in member.pax_headers


@pytest.mark.parametrize("offset", ["-1", "x", "0", str(trees.MAX_FILE + 1)])
def test_a_bad_tail_offset_is_refused(tmp_path, offset):
    info, data = based("a.txt", b"tail", sha(b"base"))
    info.pax_headers[OFFSET_KEY] = offset
    with pytest.raises(trees.BadTree):
        trees.unpack(tmp_path / "g", tar_based((info, data)), owner_of=lambda _n, _d: None)
