"""The operator installs and removes an agent's packages and adds, changes and removes its MCP
servers on the agent's page (issue 18): the same rules as the agent's proposals, audited with who
and why, and the running sandbox restarts with the change on the same conversation."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nanoclaw.models import AgentGroup, AuditLog
from tests.fakes.model_api import Reply
from tests.web.test_admin import PASSWORD, csrf_of, login, owner, site  # noqa: F401 - fixtures
from tests.operator.test_operator_e2e import GLOSSARY_SERVER, probe_wheel, setup
from tests.tg_flow import message, person, sandbox_service, texts

OLIVIA = person(111, "Olivia")


@pytest.fixture
def wheels(tmp_path, monkeypatch):
    folder = tmp_path / "wheels"
    folder.mkdir()
    probe_wheel(folder)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


def change(client, path, **form):
    token = csrf_of(client.get("/admin/agents/andy").get_data(as_text=True))
    return client.post(path, data={"csrf_token": token, **form})


def config():
    return AgentGroup.get(AgentGroup.folder == "andy").container_config or {}


def imports_probe(prefix) -> str:
    done = subprocess.run([sys.executable, "-c", "import nanoclaw_probe; print(nanoclaw_probe.hello())"],
                          env={**os.environ, "PYTHONPATH": str(prefix / "python")}, capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


def test_the_owner_installs_a_pip_package_and_removes_it_again(site, owner, wheels):  # noqa: F811
    prefix = site.config["NANOCLAW"].data_dir / "packages" / "andy"
    resp = change(owner, "/admin/agents/andy/packages", manager="pip", names="nanoclaw-probe", why="for the report")
    assert resp.status_code == 302 and resp.headers["Location"].endswith("#capabilities")
    assert imports_probe(prefix) == "probe says hello"
    assert config()["packages"] == {"apt": [], "npm": [], "pip": ["nanoclaw-probe"]}
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert "Installed for andy" in page and "<code>nanoclaw-probe</code>" in page
    added = AuditLog.get(AuditLog.action == "packages.add")
    assert (added.detail["diff"], added.detail["why"]) == (["+ pip: nanoclaw-probe"], "for the report")

    assert change(owner, "/admin/agents/andy/packages/remove", manager="pip", name="nanoclaw-probe").status_code == 302
    assert config()["packages"]["pip"] == [] and not prefix.exists()
    assert AuditLog.get(AuditLog.action == "packages.remove").detail["diff"] == ["- pip: nanoclaw-probe"]


def test_a_package_the_rules_refuse_or_pip_cannot_find_changes_nothing(site, owner, wheels):  # noqa: F811
    for names, said in (("requests==2.0", "is not a PyPI package name"),
                        ("no-such-project", "installing failed")):
        change(owner, "/admin/agents/andy/packages", manager="pip", names=names)
        page = owner.get("/admin/agents/andy").get_data(as_text=True)
        assert "Not changed" in page and said in page, names
    change(owner, "/admin/agents/andy/packages", manager="cargo", names="ripgrep")
    assert "is not a package manager here" in owner.get("/admin/agents/andy").get_data(as_text=True)
    assert "packages" not in config() and not AuditLog.select().where(AuditLog.action == "packages.add").exists()
    change(owner, "/admin/agents/andy/packages/remove", manager="pip", name="rich")
    assert "has no pip package" in owner.get("/admin/agents/andy").get_data(as_text=True)


def test_the_owner_adds_and_changes_an_mcp_server(site, owner):  # noqa: F811
    resp = change(owner, "/admin/agents/andy/mcp", name="glossary", command="python3",
                  args='/workspace/group/glossary.py --lang "en gb"', env="GLOSSARY_LANG", why="team words")
    assert resp.status_code == 302
    assert config()["mcp_servers"]["glossary"] == {"name": "glossary", "command": "python3",
                                                   "args": ["/workspace/group/glossary.py", "--lang", "en gb"],
                                                   "env": ["GLOSSARY_LANG"]}
    change(owner, "/admin/agents/andy/mcp", name="glossary", command="python3", args="/workspace/group/glossary.py")
    entries = list(AuditLog.select().where(AuditLog.action == "mcp.add").order_by(AuditLog.id))
    assert entries[0].detail["why"] == "team words"
    assert entries[1].detail["diff"] == ["- glossary: python3 /workspace/group/glossary.py --lang en gb",
                                         "+ glossary: python3 /workspace/group/glossary.py"]


@pytest.mark.parametrize("form, said", [
    (dict(name="nanoclaw", command="python3"), "an MCP server name is"),
    (dict(name="x", command="python3", env="ANTHROPIC_API_KEY"), "reserved for the host"),
    (dict(name="x", command="python3", args='"unclosed'), "quote them as in a shell"),
])
def test_an_mcp_server_the_rules_refuse_is_not_added(site, owner, form, said):  # noqa: F811
    change(owner, "/admin/agents/andy/mcp", **form)
    page = owner.get("/admin/agents/andy").get_data(as_text=True)
    assert "Not changed" in page and said in page
    assert not config().get("mcp_servers")


def test_the_running_sandbox_restarts_with_what_the_page_adds(make_settings, sqlite_url, wheels):
    """bwrap: a warm agent; on its page the owner installs a pip package, adds an MCP server and
    removes the package again. Each time the sandbox restarts on the same conversation, the agent is
    told, and what it then runs shows the change."""
    probe = "python3 -c 'import nanoclaw_probe; print(nanoclaw_probe.hello())' 2>&1 | tail -n 1"

    def brain(req):
        prompt, results = req.current_prompt(), req.turn_tool_results()
        if "installed pip packages" in prompt or "removed the pip package" in prompt:
            if not results:
                return Reply.call("Bash", command=probe)
            return Reply.say(f"probe: {results[-1].text.strip()}")
        if "added the MCP server glossary" in prompt:
            if "mcp__glossary__lookup" not in req.tool_names():
                return Reply.say("no glossary tool")
            if not results:
                return Reply.call("mcp__glossary__lookup", word="NanoClaw")
            return Reply.say(f"glossary: {results[-1].text}")
        return Reply.say("hello")

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        setup(svc)
        (svc.settings.groups_dir / "andy" / "glossary_server.py").write_text(GLOSSARY_SERVER)
        svc.app.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", "telegram:111"],
                                         input=f"{PASSWORD}\n{PASSWORD}\n")
        page = svc.app.test_client()
        assert login(page, "telegram:111").status_code == 302
        svc.post(message(111, OLIVIA, "hi"))
        svc.wait(lambda: texts(svc.tg, 111) == ["hello"], what="the first answer")

        def after(n):
            svc.wait(lambda: len(texts(svc.tg, 111)) >= n, timeout=90, what=f"answer {n}")
            return texts(svc.tg, 111)[n - 1]

        change(page, "/admin/agents/andy/packages", manager="pip", names="nanoclaw-probe")
        assert after(2) == "probe: probe says hello"
        change(page, "/admin/agents/andy/mcp", name="glossary", command="python3",
               args="/workspace/group/glossary_server.py")
        assert "a personal agent host (glossary server)" in after(3)
        change(page, "/admin/agents/andy/packages/remove", manager="pip", name="nanoclaw-probe", why="not needed")
        assert "No module named 'nanoclaw_probe'" in after(4)
