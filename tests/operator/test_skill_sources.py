"""Where a skill comes from (issue 66, item 3): a git source is pinned to a full commit (a branch or a
tag is refused before anything is fetched), an archive to its sha256; what git or an archive hands back
is unpacked member by member, a link or a path leaving the folder refused and never created; the host's
pinned copy, its check at each start, the plugin a start mounts, and `skill add|list|remove`.
Hypothesis over source names and archive members."""
from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nanoclaw.operator import skill_sources, skill_store
from nanoclaw.operator.skill_format import SkillRefused, read_folder
from nanoclaw.operator.skill_sources import parse

GOOD = "---\nname: pdf-tools\ndescription: Fill PDF forms.\n---\nRun fill.py.\n"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin"}


def repo_with(tmp_path, files: dict[str, bytes], links: dict[str, str] | None = None) -> tuple[str, str]:
    repo = tmp_path / "repo"
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    for rel, to in (links or {}).items():
        os.symlink(to, repo / rel)
    env = {**GIT_ENV, "HOME": str(tmp_path)}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, env=env, capture_output=True, text=True).stdout
    return str(repo), commit.strip()


@pytest.mark.parametrize("pin", ["main", "v1.0", "HEAD", "3f2a9c1", "refs/heads/main", "3F2A" * 10])
def test_a_branch_a_tag_or_a_short_id_is_refused_with_what_to_write(pin):
    with pytest.raises(SkillRefused, match="not a full commit id.*git rev-parse"):
        parse(f"https://github.com/acme/skills#{pin}")


@given(st.text(min_size=1, max_size=80).filter(lambda p: ":" not in p))
def test_only_a_full_commit_id_pins_a_git_source(pin):
    try:
        source = parse(f"https://example.org/r.git#{pin}")
    except SkillRefused as exc:
        assert str(exc)
        return
    assert len(source.commit) in (40, 64) and set(source.commit) <= set("0123456789abcdef")


def test_what_a_source_names():
    commit = "a" * 40
    assert parse(f"https://h/r.git#{commit}:skills/pdf") == skill_sources.Source("git", "https://h/r.git", commit,
                                                                                 "skills/pdf")
    assert parse("./skills/pdf").kind == "folder"
    with pytest.raises(SkillRefused, match="sha256"):
        parse("https://h/skill.tar.gz")
    with pytest.raises(SkillRefused, match="https only"):
        parse("http://h/skill.tar.gz", sha256="b" * 64)
    with pytest.raises(SkillRefused, match="without \\.\\."):
        parse(f"https://h/r.git#{commit}:../../etc")


def test_a_skill_from_a_local_repository_at_a_commit(tmp_path):
    location, commit = repo_with(tmp_path, {"skills/pdf-tools/SKILL.md": GOOD.encode(),
                                            "skills/pdf-tools/fill.py": b"print(1)\n", "README": b"x"})
    folder = skill_sources.fetch_git(parse(f"{location}#{commit}:skills/pdf-tools"), tmp_path / "work", owner=True)
    skill = read_folder(folder)
    assert skill.name == "pdf-tools" and [f.path for f in skill.files] == ["SKILL.md", "fill.py"]
    with pytest.raises(SkillRefused, match="no commit"):
        skill_sources.fetch_git(parse(f"{location}#{'0' * 40}:skills/pdf-tools"), tmp_path / "w2", owner=True)


def test_a_link_in_the_repository_is_refused_and_never_created(tmp_path):
    location, commit = repo_with(tmp_path, {"pdf-tools/SKILL.md": GOOD.encode()},
                                 links={"pdf-tools/key": "/etc/shadow"})
    with pytest.raises(SkillRefused, match="key is a link"):
        skill_sources.fetch_git(parse(f"{location}#{commit}:pdf-tools"), tmp_path / "work", owner=True)
    assert not (tmp_path / "work" / "skill" / "pdf-tools" / "key").is_symlink()


def test_an_agent_named_source_is_https_only(tmp_path):
    location, commit = repo_with(tmp_path, {"pdf-tools/SKILL.md": GOOD.encode()})
    for url in (location, f"file://{location}", "git://127.0.0.1/x", "ssh://git@h/x"):
        with pytest.raises(SkillRefused, match="https only"):
            skill_sources.fetch_git(parse(f"{url}#{commit}"), tmp_path / "work", owner=False)


MEMBER_NAMES = st.lists(st.one_of(
    st.sampled_from(["SKILL.md", "../evil", "/etc/evil", "a/../../evil", "ok/file", "./x", "a/b/c"]),
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)), min_size=1, max_size=6)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=MEMBER_NAMES, link=st.booleans())
def test_nothing_outside_the_skill_folder_is_ever_written(tmp_path_factory, names, link):
    root = tmp_path_factory.mktemp("unpack")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i, name in enumerate(names):
            info = tarfile.TarInfo(name)
            if link and i == len(names) - 1:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))
    dest = root / "in" / "skill"
    try:
        skill_sources.unpack_tar(buf.getvalue(), dest, strip="")
    except (SkillRefused, FileExistsError, NotADirectoryError, IsADirectoryError) as exc:
        assert str(exc)
    for path in root.rglob("*"):
        assert path == root / "in" or dest in (path, *path.parents), path
        assert not path.is_symlink(), path


def test_an_archive_must_hash_as_named(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("SKILL.md")
        info.size = len(GOOD)
        tar.addfile(info, io.BytesIO(GOOD.encode()))
    data = buf.getvalue()
    import hashlib
    right = hashlib.sha256(data).hexdigest()
    source = parse("https://h/pdf-tools.tar.gz", sha256="f" * 64)
    with pytest.raises(SkillRefused, match="sha256 is"):
        skill_sources.fetch_archive(source, tmp_path / "a", lambda url, limit: data)
    folder = skill_sources.fetch_archive(parse("https://h/pdf-tools.tar.gz", sha256=right), tmp_path / "b",
                                         lambda url, limit: data)
    assert read_folder(folder).name == "pdf-tools"


# --- the host's pinned copy ---------------------------------------------------------------------

def test_a_pinned_copy_is_checked_at_each_start_and_offered_as_a_plugin(app, tmp_path):
    from nanoclaw.models import AgentGroup

    settings_obj = app.config["NANOCLAW"]
    src = tmp_path / "pdf-tools"
    src.mkdir()
    (src / "SKILL.md").write_text(GOOD)
    with app.app_context():
        agent = AgentGroup.create(name="Andy", folder="andy")
        skill = read_folder(src)
        skill_store.install(settings_obj, agent, src, skill, str(src), "cli")
        (src / "SKILL.md").write_text(GOOD + "changed after adding\n")  # the source moves on; the pin does not
        checked = skill_store.verify(settings_obj, "andy")
        assert [r.name for r in checked.ready] == ["pdf-tools"] and not checked.changed
        view = skill_store.view(settings_obj, "sbx", "andy", checked.ready)
        assert (view / "skills" / "pdf-tools" / "SKILL.md").read_text() == GOOD
        assert (view / ".claude-plugin" / "plugin.json").is_file()

        copy = skill_store.copy_path(settings_obj, "andy", skill.hash, "pdf-tools") / "SKILL.md"
        copy.write_text(GOOD.replace("Fill", "Steal"))
        checked = skill_store.verify(settings_obj, "andy")
        assert not checked.ready and [r.name for r in checked.changed] == ["pdf-tools"]
        assert skill_store.view(settings_obj, "sbx", "andy", checked.ready) is None
        assert not (settings_obj.data_dir / "run" / "skills" / "sbx").exists()
        assert skill_store.mark_told(checked.changed[0]) and not skill_store.mark_told(checked.changed[0])

        assert skill_store.remove(settings_obj, agent, "pdf-tools")
        assert not (settings_obj.data_dir / "skills" / "andy" / skill.hash).exists()
        assert not skill_store.remove(settings_obj, agent, "pdf-tools")


def test_skill_add_list_remove_from_the_command_line(app, cli, tmp_path):
    location, commit = repo_with(tmp_path, {"pdf-tools/SKILL.md": GOOD.encode()})
    assert cli("agent", "create", "Andy").exit_code == 0
    branch = cli("skill", "add", "andy", f"{location}#main:pdf-tools")
    assert branch.exit_code == 2 and branch.output.count("\n") == 1 and "full commit id" in branch.output
    added = cli("skill", "add", "andy", f"{location}#{commit}:pdf-tools")
    assert added.exit_code == 0, added.output
    assert "nanoclaw:pdf-tools" in added.output and "hash: sha256:" in added.output
    assert f"#{commit}:pdf-tools" in cli("skill", "list").output
    assert cli("skill", "add", "nobody", f"{location}#{commit}:pdf-tools").exit_code == 2
    assert cli("skill", "remove", "andy", "pdf-tools").exit_code == 0
    gone = cli("skill", "remove", "andy", "pdf-tools")
    assert gone.exit_code == 2 and "has no skill" in gone.output


@pytest.mark.parametrize("source, why", [
    (f"file:///etc#{'a' * 40}", "https only"), (f"http://example.org/r.git#{'a' * 40}", "https only"),
    (f"ssh://git@example.org/r.git#{'a' * 40}", "https only"), ("https://example.org/r.git#main", "full commit id"),
    (f"https://127.0.0.1/r.git#{'a' * 40}", "not a public address"),
    (f"https://169.254.169.254/r.git#{'a' * 40}", "metadata"), ("https://example.org/x.tar.gz", "sha256"),
])
def test_a_source_an_agent_names_is_refused_before_any_fetch(make_settings, source, why):
    from nanoclaw.operator.skill_proposals import check_source
    from nanoclaw.proposal_rules import RuleError

    with pytest.raises(RuleError, match=why):
        check_source(make_settings(), source)
