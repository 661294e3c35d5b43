"""Links between agents and the hooks that wake one, on the page (issue 65): the owner links and
unlinks; a scoped admin of one agent cannot link it to an agent it does not administer (403, nothing
changed); an admin of both can; only the owner disables a hook; no CSRF, no change."""
from __future__ import annotations

from nanoclaw.delegation.tables import AgentLink
from nanoclaw.hooks.tables import Webhook
from nanoclaw.models import AuditLog
from tests.web.test_admin import csrf_of, login, owner, site  # noqa: F401  (fixtures)

ADMIN, PASSWORD = "slack:U1", "bea admin password"


def admin_of(site, cli, *folders):
    for folder in folders:
        assert cli("user", "add", ADMIN, "--role", "admin", "--agent", folder).exit_code == 0
    site.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", ADMIN, "--password-stdin"],
                                  input=PASSWORD + "\n")
    client = site.test_client()
    assert login(client, ADMIN, PASSWORD).status_code == 302
    return client


def link(client, to="finance", mode="allowed", folder="andy"):
    token = csrf_of(client.get(f"/admin/agents/{folder}").get_data(as_text=True))
    return client.post(f"/admin/agents/{folder}/links", data={"csrf_token": token, "to": to, "mode": mode})


def test_the_owner_links_and_unlinks(owner, cli):
    assert cli("agent", "create", "Finance").exit_code == 0
    assert link(owner).status_code == 302
    assert [(l.from_agent.folder, l.to_agent.folder, l.mode) for l in AgentLink.select()] == [("andy", "finance", "allowed")]
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert "May ask" in page and "<code>finance</code>" in page
    token = csrf_of(page)
    assert owner.post("/admin/agents/andy/links/finance/remove", data={"csrf_token": token}).status_code == 302
    assert AgentLink.select().count() == 0
    assert AuditLog.select().where(AuditLog.action == "agent.unlink").count() == 1
    assert owner.post("/admin/agents/andy/links", data={"to": "finance", "mode": "allowed"}).status_code == 400


def test_a_scoped_admin_links_only_between_agents_it_administers(site, cli):
    assert cli("agent", "create", "Finance").exit_code == 0
    client = admin_of(site, cli, "andy")
    assert link(client).status_code == 403 and AgentLink.select().count() == 0
    assert cli("user", "add", ADMIN, "--role", "admin", "--agent", "finance").exit_code == 0
    assert link(client).status_code == 302 and AgentLink.select().count() == 1


def test_only_the_owner_disables_a_hook(site, cli, owner, tmp_path):
    template = tmp_path / "t.j2"
    template.write_text("hi {{ payload.x }}")
    for args in (("user", "add", "telegram:42", "--role", "owner"), ("wire", "telegram", "42", "andy"),
                 ("webhook", "add", "gh", "--agent", "andy", "--chat", "telegram", "42", "--template", str(template),
                  "--bearer", "HOOK_TOKEN")):
        cli(*args)
    client = admin_of(site, cli, "andy")
    token = csrf_of(client.get("/admin/agents/andy").get_data(as_text=True))
    assert client.post("/admin/agents/andy/hooks/gh/disable", data={"csrf_token": token}).status_code == 403
    assert Webhook.get().enabled
    token = csrf_of(owner.get("/admin/agents/andy").get_data(as_text=True))
    assert owner.post("/admin/agents/andy/hooks/gh/disable", data={"csrf_token": token}).status_code == 302
    assert not Webhook.get().enabled


def test_the_owner_adds_a_hook_on_the_page_and_an_admin_cannot(site, cli, owner):
    cli("user", "add", "telegram:42", "--role", "owner")
    cli("wire", "telegram", "42", "andy")
    form = {"name": "gh", "chat": "telegram 42", "scheme": "github", "secret_env": "GH_HOOK_SECRET",
            "events": "issues", "template": "Issue: {{ payload.issue.title }}"}
    client = admin_of(site, cli, "andy")
    token = csrf_of(client.get("/admin/agents/andy").get_data(as_text=True))
    assert client.post("/admin/agents/andy/hooks", data={**form, "csrf_token": token}).status_code == 403
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert "Add webhook" in page
    bad = owner.post("/admin/agents/andy/hooks", data={**form, "template": "{% if %}", "csrf_token": csrf_of(page)},
                     follow_redirects=True).get_data(as_text=True)
    assert "Not added: the template does not compile" in bad and Webhook.select().count() == 0
    done = owner.post("/admin/agents/andy/hooks", data={**form, "csrf_token": csrf_of(page)}, follow_redirects=True)
    assert "Added: POST /hooks/gh" in done.get_data(as_text=True)
    hook = Webhook.get()
    assert (hook.scheme, hook.secret_env, hook.events, hook.created_by) == ("github", "GH_HOOK_SECRET", ["issues"],
                                                                          "telegram:42")
