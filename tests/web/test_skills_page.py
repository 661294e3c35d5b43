"""An agent's skills on the page (issue 66): the owner adds one from a git commit and sees it; a scoped
admin adds only from a source the owner trusts (matched by whole path segments, never a look-alike),
never from a folder of this machine; another agent's admin cannot touch them; no CSRF, no change."""
from __future__ import annotations

from hypothesis import given, strategies as st

from nanoclaw.models import AgentGroup, AuditLog
from nanoclaw.operator import skill_store
from nanoclaw.operator.skill_adding import matches, normal_prefix
from tests.operator.test_skill_sources import GOOD, repo_with
from tests.web.test_admin import csrf_of, owner, site  # noqa: F401  (fixtures)
from tests.web.test_links_page import admin_of

def add_admin(site, cli, agent: str) -> object:
    assert cli("agent", "create", agent.title()).exit_code == 0 or agent == "andy"
    return admin_of(site, cli, agent)


def post_add(client, source: str, folder: str = "andy"):
    token = csrf_of(client.get(f"/admin/agents/{folder}").get_data(as_text=True))
    return client.post(f"/admin/agents/{folder}/skills", data={"csrf_token": token, "source": source},
                       follow_redirects=True)


def test_the_owner_adds_a_skill_from_a_commit_and_removes_it(owner, tmp_path):
    location, commit = repo_with(tmp_path, {"pdf-tools/SKILL.md": GOOD.encode()})
    page = post_add(owner, f"{location}#{commit}:pdf-tools").get_data(as_text=True)
    assert "Added pdf-tools (sha256:" in page and "nanoclaw:pdf-tools" in page
    assert [s.name for s in skill_store.installed("andy")] == ["pdf-tools"]
    assert AuditLog.get(AuditLog.action == "skill.add").actor == "telegram:42"
    refused = post_add(owner, f"{location}#main:pdf-tools").get_data(as_text=True)
    assert "Not added:" in refused and "full commit id" in refused
    html = owner.get("/admin/agents/andy").get_data(as_text=True)
    page = owner.post("/admin/agents/andy/skills/pdf-tools/remove", data={"csrf_token": csrf_of(html)},
                      follow_redirects=True).get_data(as_text=True)
    assert "Removed pdf-tools" in page and skill_store.installed("andy") == []


def test_a_scoped_admin_adds_only_from_a_trusted_source(site, cli, tmp_path):
    location, commit = repo_with(tmp_path, {"pdf-tools/SKILL.md": GOOD.encode()})
    client = add_admin(site, cli, "andy")
    page = post_add(client, f"{location}#{commit}:pdf-tools").get_data(as_text=True)
    assert "Not added: only the owner adds a skill from this machine or over another protocol than https" in page
    assert cli("skill", "trust", "https://github.com/acme").exit_code == 0
    page = post_add(client, f"https://github.com/acme-evil/skills#{commit}").get_data(as_text=True)
    assert "is not under a source the owner trusts" in page
    assert skill_store.installed("andy") == [] and not AuditLog.select().where(AuditLog.action == "skill.add").exists()


def test_another_agents_admin_and_a_missing_csrf_change_nothing(site, cli, tmp_path):
    location, commit = repo_with(tmp_path, {"pdf-tools/SKILL.md": GOOD.encode()})
    assert cli("skill", "add", "andy", f"{location}#{commit}:pdf-tools").exit_code == 0
    client = add_admin(site, cli, "bea")
    token = csrf_of(client.get("/admin/agents/bea").get_data(as_text=True))
    assert client.post("/admin/agents/andy/skills", data={"csrf_token": token, "source": location}).status_code in (403, 404)
    assert client.post("/admin/agents/andy/skills/pdf-tools/remove", data={"csrf_token": token}).status_code in (403, 404)
    assert client.post("/admin/agents/bea/skills", data={"source": f"{location}#{commit}:pdf-tools"}).status_code == 400
    assert [s.name for s in skill_store.installed("andy")] == ["pdf-tools"] and skill_store.installed("bea") == []
    assert AgentGroup.select().count() == 2


SEGMENT = st.text(st.characters(whitelist_categories=("Ll", "Nd"), whitelist_characters="-_."), min_size=1, max_size=8)


@given(owner_seg=SEGMENT, extra=SEGMENT, rest=st.lists(SEGMENT, max_size=3))
def test_a_trusted_prefix_matches_whole_path_segments_only(owner_seg, extra, rest):
    prefix = normal_prefix(f"https://github.com/{owner_seg}")
    tail = "/".join(rest)
    assert matches(prefix, f"https://github.com/{owner_seg}/{tail}") or not owner_seg.strip(".")
    assert not matches(prefix, f"https://github.com/{owner_seg}{extra}/{tail}")
    assert not matches(prefix, f"https://github.com.evil.example/{owner_seg}/{tail}")
    assert not matches(prefix, f"http://github.com/{owner_seg}/{tail}")
