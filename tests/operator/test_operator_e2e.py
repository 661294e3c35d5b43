"""Operator control end to end: the real runner in a bwrap sandbox (real SDK + CLI, fake model), the
real proxy door, the web program's webhooks and delivery, the fake Telegram where the owner sees
cards, clicks and replies. Local HTTPS servers with a throw-away certificate stand in for the
internet.

- egress: a refused request (readable), propose_egress, the owner approves from the chat card, the
  agent's next request goes through, in the same sandbox;
- credential route: same, and the token reaches the upstream while `env` in the sandbox has none;
- ask_operator: answered by a chat reply within the wait, and answered after it (the next message);
- install_packages: refused names at the tool, then a proposal the owner approves (bwrap cannot
  install: the agent and the card say so);
- add_mcp_server: approved from the card, the sandbox restarts without an image build, the new
  server's tool works and the conversation goes on.
"""
from __future__ import annotations

import json
import shutil
import time

import pytest

from fakes.https_server import HttpsServer, make_cert
from nanoclaw.models import AuditLog, HelpRequest, PendingProposal
from nanoclaw.proxy.policy_files import EGRESS_FILE, group_file, policy_root
from tests.fakes.model_api import Reply
from tests.tg_flow import (_message_ids, buttons, cards, click, edits, message, person, sandbox_service, shown, texts,
                           toasts)

OWNER = person(111, "Olivia")
TOKEN = "rpt-token-0123456789abcdef-secret"
CURL = "curl -sS -v --noproxy '' --cacert /workspace/group/test-ca.pem"


def reply_to(card: dict, sender: dict, text: str) -> dict:
    """The owner's chat reply to one of the bot's cards."""
    update = message(int(card["chat_id"]), sender, text)
    update["message"]["reply_to_message"] = {
        "message_id": card["_message_id"], "from": {"id": 7000001, "is_bot": True, "first_name": "Andy"},
        "chat": update["message"]["chat"], "date": int(time.time()), "text": card["text"]}
    update["message"]["message_id"] = next(_message_ids)
    return update


def setup(svc, cert=None):
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    svc.cli("wire", "telegram", "111", "andy")
    if cert is not None:
        shutil.copy(cert.cert, svc.settings.groups_dir / "andy" / "test-ca.pem")


def wait_card(svc, n=1):
    """The n-th card at the owner, once the host has recorded where it went (a click may follow at once)."""
    card = svc.wait(lambda: cards(svc.tg)[n - 1] if len(cards(svc.tg)) >= n else None, what=f"card {n}")
    sent = str(card["_message_id"])
    svc.wait(lambda: PendingProposal.select().where(PendingProposal.card_message_id == sent).exists()
             or HelpRequest.select().where(HelpRequest.card_message_id == sent).exists(), what="the card's record")
    return card


def bash_results(model) -> list[str]:
    out = []
    for call in model.model_calls():
        for r in call.tool_results():
            out.append(r.text)
    return out


@pytest.fixture
def cert(tmp_path):
    return make_cert(tmp_path / "tls")


# --- egress -------------------------------------------------------------------------------------

def test_refused_egress_is_proposed_approved_from_the_card_and_works_without_a_restart(
        make_settings, sqlite_url, cert):
    with HttpsServer(cert) as site:
        host = f"127.0.0.1:{site.port}"
        fetch = f"{CURL} https://{host}/report 2>&1 | tail -n 25"

        def brain(req):
            prompt, results = req.current_prompt(), req.turn_tool_results()
            if "fetch the report" in prompt:
                if not results:
                    return Reply.call("Bash", command=f"touch /tmp/same-sandbox; {fetch}")
                if len(results) == 1:
                    return Reply.call("mcp__nanoclaw__propose_egress", host=host, reason="to fetch the report")
                return Reply.say("I asked the owner for access to the report server.")
            if "approved your proposal" in prompt:
                if not results:
                    return Reply.call("Bash", command=f"test -e /tmp/same-sandbox && echo SAME-SANDBOX; {fetch}")
                return Reply.say("Fetched: " + ("SAME-SANDBOX" if "SAME-SANDBOX" in results[-1].text else "new")
                                 + (" ok" if '"ok": true' in results[-1].text else " failed"))
            return Reply.say("?")

        with sandbox_service(make_settings, sqlite_url, brain) as svc:
            setup(svc, cert)
            svc.post(message(111, OWNER, "fetch the report please"))
            card = wait_card(svc)
            refusal = bash_results(svc.model)[0]
            assert f"403 egress to {host} is not on the allowlist of agent group 'andy'" in refusal
            assert "propose_egress" in refusal
            assert site.requests == []
            assert f"Andy asks: allow HTTPS to {host}" in shown(card) and f"+ {host}" in shown(card)
            assert "to fetch the report" in shown(card)
            svc.wait(lambda: "I asked the owner" in " ".join(texts(svc.tg, 111)), what="the agent's first reply")

            svc.post(click(buttons(card)["✅ Approve"], OWNER, card))
            assert toasts(svc.tg)[-1] == f"Approved: allow HTTPS to {host}."
            svc.wait(lambda: any(t.startswith("Fetched:") for t in texts(svc.tg, 111)), what="the retry")
            assert texts(svc.tg, 111)[-1] == "Fetched: SAME-SANDBOX ok"
            assert [r["path"] for r in site.requests] == ["/report"]
            assert edits(svc.tg)[-1]["text"].startswith(f"✅ Approved by Olivia: allow HTTPS to {host}")
            allow = json.loads(group_file(policy_root(svc.settings), "andy", EGRESS_FILE).read_text())["allow"]
            assert allow == [host]
            entry = AuditLog.get(AuditLog.action == "proposal.approve")
            assert entry.actor == "telegram:111" and entry.detail["diff"] == [f"+ {host}"]
            svc.post(click(buttons(card)["❌ Reject"], OWNER, card))
            assert toasts(svc.tg)[-1] == "Already approved by Olivia."


# --- credential route ---------------------------------------------------------------------------

def test_credential_route_carries_a_token_the_sandbox_never_sees(make_settings, sqlite_url, cert, monkeypatch):
    monkeypatch.setenv("REPORT_API_TOKEN", TOKEN)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert.cert))  # the proxy trusts the test upstream
    with HttpsServer(cert) as api:
        call = "curl -sS $NANOCLAW_PROXY_URL/reports/latest"

        def brain(req):
            prompt, results = req.current_prompt(), req.turn_tool_results()
            if "latest report" in prompt:
                if not results:
                    return Reply.call("Bash", command=call)
                if len(results) == 1:
                    return Reply.call("mcp__nanoclaw__propose_credential_route", host_or_path="/reports/",
                                      upstream=api.url, secret_name="REPORT_API_TOKEN")
                return Reply.say("I asked for a route to the report API.")
            if "approved your proposal" in prompt:
                if not results:
                    return Reply.call("Bash", command=f"env; cat /proc/1/environ | tr '\\0' '\\n'; {call}")
                return Reply.say("API says: " + results[-1].text.strip().splitlines()[-1])
            return Reply.say("?")

        with sandbox_service(make_settings, sqlite_url, brain) as svc:
            setup(svc)
            svc.post(message(111, OWNER, "get the latest report"))
            card = wait_card(svc)
            assert "no route for /reports/latest" in bash_results(svc.model)[0]
            assert f"/reports/ -> {api.url} with Authorization: Bearer $REPORT_API_TOKEN" in shown(card)
            svc.post(click(buttons(card)["✅ Approve"], OWNER, card))
            svc.wait(lambda: any(t.startswith("API says:") for t in texts(svc.tg, 111)), what="the call")
            assert texts(svc.tg, 111)[-1] == 'API says: {"ok": true, "path": "/latest", "authorized": true}'
            assert api.requests[-1]["headers"]["authorization"] == f"Bearer {TOKEN}"
            env_dump = bash_results(svc.model)[-1]
            assert "HOME=/workspace/session/home" in env_dump and "NANOCLAW_PROXY_URL=" in env_dump
            assert TOKEN not in env_dump and "REPORT_API_TOKEN" not in env_dump
            for model_call in svc.model.model_calls():
                assert TOKEN not in model_call.all_text()
            assert TOKEN not in json.dumps([a.detail for a in AuditLog.select()])


# --- ask_operator -------------------------------------------------------------------------------

def asking(wait_seconds: int):
    def brain(req):
        prompt, results = req.current_prompt(), req.turn_tool_results()
        if "answer to your help request" in prompt:
            return Reply.say("Late answer received: " + prompt.split(")", 1)[-1].split("<")[0].strip())
        if "deploy" in prompt:
            if not results:
                return Reply.call("mcp__nanoclaw__ask_operator", text="Which branch should I deploy?",
                                  wait_seconds=wait_seconds)
            return Reply.say(f"Tool said: {results[-1].text}")
        return Reply.say("?")
    return brain


def test_ask_operator_answered_in_time_by_a_reply_to_the_card(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, asking(60)) as svc:
        setup(svc)
        svc.post(message(111, OWNER, "please deploy"))
        card = wait_card(svc)
        assert "Andy needs help" in shown(card) and "Which branch should I deploy?" in shown(card)
        svc.post(reply_to(card, OWNER, "use main"))
        svc.wait(lambda: any(t.startswith("Tool said:") for t in texts(svc.tg, 111)), what="the agent's answer")
        assert "Sent to Andy." in texts(svc.tg, 111)
        assert texts(svc.tg, 111)[-1] == "Tool said: The operator (Olivia) answered: use main"
        calls = len(svc.model.model_calls())
        sentinel = svc.settled(111, OWNER)  # the answer row must not start a turn of its own
        assert calls == 2 and len(svc.model.model_calls()) == 3 and "use main" not in sentinel.current_prompt()
        assert HelpRequest.get().state == "answered"
        assert edits(svc.tg)[-1]["text"].endswith("↩ Olivia answered: use main")
        svc.post(reply_to(card, OWNER, "no wait, use dev"))
        assert texts(svc.tg, 111)[-1] == "Already answered by Olivia."


def test_ask_operator_answered_late_arrives_as_the_next_message(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, asking(2)) as svc:
        setup(svc)
        svc.post(message(111, OWNER, "please deploy"))
        card = wait_card(svc)
        svc.wait(lambda: any(t.startswith("Tool said:") for t in texts(svc.tg, 111)), what="the timeout")
        said = [t for t in texts(svc.tg, 111) if t.startswith("Tool said:")][0]
        ref = HelpRequest.get().ref
        assert said.startswith(f"Tool said: pending, id={ref}.")
        svc.post(reply_to(card, OWNER, "use the release branch"))
        svc.wait(lambda: any(t.startswith("Late answer") for t in texts(svc.tg, 111)), what="the late answer")
        assert texts(svc.tg, 111)[-1] == "Late answer received: use the release branch"


# --- install_packages ---------------------------------------------------------------------------

def probe_wheel(folder) -> None:
    """A real wheel of a tiny PyPI project `nanoclaw-probe`, in a folder pip takes as its index."""
    import base64
    import hashlib
    import zipfile
    files = {"nanoclaw_probe/__init__.py": b"def hello():\n    return 'probe says hello'\n",
             "nanoclaw_probe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: nanoclaw-probe\nVersion: 1.0\n",
             "nanoclaw_probe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  b"Tag: py3-none-any\n"}
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
                     f"{len(data)}\n" for name, data in files.items()) + "nanoclaw_probe-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / "nanoclaw_probe-1.0-py3-none-any.whl", "w") as whl:
        for name, data in {**files, "nanoclaw_probe-1.0.dist-info/RECORD": record.encode()}.items():
            whl.writestr(name, data)


def test_install_packages_under_bubblewrap_pip_into_the_agents_prefix_apt_refused(make_settings, sqlite_url,
                                                                                   tmp_path, monkeypatch):
    """A bad name is refused by the tool; apt by the host (bubblewrap runs the host's programs: it
    says to use Docker); a pip package the owner approves is installed by the host into the agent's
    own prefix, the sandbox restarts, and the agent imports it."""
    index = tmp_path / "index"
    index.mkdir()
    probe_wheel(index)
    monkeypatch.setenv("PIP_NO_INDEX", "1")           # pip's own settings: the local index stands in for PyPI
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    probe = "python3 -c 'import nanoclaw_probe; print(nanoclaw_probe.hello())' 2>&1 | tail -1"

    def brain(req):
        prompt, results = req.current_prompt(), req.turn_tool_results()
        if "need jq" in prompt:
            if not results:
                return Reply.call("mcp__nanoclaw__install_packages", apt=["jq; rm -rf /"], reason="json")
            if len(results) == 1:
                return Reply.call("mcp__nanoclaw__install_packages", apt=["jq"], reason="to read JSON")
            return Reply.say("Asked for jq.")
        if "refused by the host" in prompt:
            return Reply.say("Refused: " + ("docker" if "need the Docker runtime" in prompt else "?"))
        if "need the probe" in prompt:
            if not results:
                return Reply.call("Bash", command=probe)
            if len(results) == 1:
                return Reply.call("mcp__nanoclaw__install_packages", pip=["nanoclaw-probe"], reason="probing")
            return Reply.say("Asked for the probe.")
        if "approved your proposal" in prompt:
            if not results:
                return Reply.call("Bash", command=probe + "; touch /workspace/packages/python/mine 2>&1 | tail -1")
            return Reply.say("after: " + " | ".join(results[-1].text.strip().splitlines()))
        return Reply.say("?")

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        setup(svc)
        svc.post(message(111, OWNER, "we need jq"))
        svc.wait(lambda: any(t.startswith("Refused:") for t in texts(svc.tg, 111)), what="the refusal")
        first = [r for call in svc.model.model_calls() for r in call.tool_results()][0]
        assert first.is_error and "'jq; rm -rf /' is not a Debian package name" in first.text
        assert "Refused: docker" in texts(svc.tg, 111) and cards(svc.tg) == []  # no card for what cannot work

        svc.post(message(111, OWNER, "we need the probe"))
        card = wait_card(svc)
        assert any("No module named" in r for r in bash_results(svc.model))  # not there before the approval
        assert "+ pip: nanoclaw-probe" in shown(card) and "package folder, /workspace/packages" in shown(card)
        svc.post(click(buttons(card)["✅ Approve"], OWNER, card))
        from nanoclaw.operator.proposals import wait_for_workers
        wait_for_workers(120)
        assert PendingProposal.get().state == "approved", PendingProposal.get().note
        svc.wait(lambda: any(t.startswith("after:") for t in texts(svc.tg, 111)), timeout=120, what="the new turn")
        said = texts(svc.tg, 111)[-1]
        assert said.startswith("after: probe says hello | ") and "Read-only file system" in said  # not the agent's to change
        prefix = svc.settings.data_dir / "packages" / "andy" / "python" / "nanoclaw_probe"
        assert prefix.is_dir() and prefix.stat().st_mode & 0o777 == 0o755


def test_install_packages_rebuilds_the_image_and_the_conversation_goes_on(make_settings, sqlite_url):
    """Docker: the approved package lands in a per-group image; the sandbox restarts on it, on the same
    session, and the SDK resumes the conversation (the model sees the earlier turn again)."""
    from conftest import require
    from nanoclaw.runtime import docker as docker_rt
    from nanoclaw.runtime.image import image_exists
    client, where = docker_rt.connect()
    require(client is not None, f"no Docker engine ({where}); scripts/docker-engine.sh start")
    require(image_exists(make_settings(), client=client), "no agent image (flask nanoclaw image build)")

    def brain(req):
        prompt, results = req.current_prompt(), req.turn_tool_results()
        if "need curl" in prompt:
            if not results:
                return Reply.call("Bash", command="touch /tmp/old-sandbox; command -v curl || echo NO-CURL")
            if len(results) == 1:
                return Reply.call("mcp__nanoclaw__install_packages", apt=["curl"], reason="HTTP from the shell")
            return Reply.say("Asked for curl.")
        if "approved your proposal" in prompt:
            if not results:
                return Reply.call("Bash", command="command -v curl >/dev/null && echo HAVE-CURL; "
                                                  "test -e /tmp/old-sandbox && echo OLD-SANDBOX || echo NEW-SANDBOX")
            remembered = any("we need curl" in t for t in req.user_texts())
            return Reply.say("after: " + " ".join(results[-1].text.split()) + f" remembered={remembered}")
        return Reply.say("?")

    with sandbox_service(make_settings, sqlite_url, brain, runtime="docker") as svc:
        setup(svc)
        svc.post(message(111, OWNER, "we need curl here"))
        card = wait_card(svc)
        assert "NO-CURL" in bash_results(svc.model)[0]
        assert "+ apt: curl" in shown(card)
        assert "+ image nanoclaw-agent-andy (nanoclaw-agent:latest + the packages)" in shown(card)
        session_id = __import__("nanoclaw.models", fromlist=["Session"]).Session.get().id
        svc.post(click(buttons(card)["✅ Approve"], OWNER, card))
        assert toasts(svc.tg)[-1].startswith("Approved: install apt curl. Applying it now")
        from nanoclaw.operator.proposals import wait_for_workers
        wait_for_workers(600)
        assert PendingProposal.get().state == "approved", PendingProposal.get().note
        svc.wait(lambda: any(t.startswith("after:") for t in texts(svc.tg, 111)), timeout=180, what="the new turn")
        assert texts(svc.tg, 111)[-1] == "after: HAVE-CURL NEW-SANDBOX remembered=True"
        from nanoclaw.models import AgentGroup, Session
        tag = AgentGroup.get(AgentGroup.folder == "andy").container_config["image"]
        [running] = client.containers.list(filters={"label": f"nanoclaw.install={svc.settings.install_id}"})
        assert running.attrs["Config"]["Image"] == tag and running.labels["nanoclaw.session"] == session_id
        assert [s.id for s in Session.select()] == [session_id]
        assert edits(svc.tg)[-1]["text"].startswith("✅ Approved by Olivia: install apt curl")


# --- add_mcp_server ----------------------------------------------------------------------------

GLOSSARY_SERVER = """
from mcp.server.mcpserver import MCPServer

server = MCPServer("glossary")


@server.tool()
def lookup(word: str) -> str:
    \"\"\"Look a word up in the team glossary.\"\"\"
    return {"nanoclaw": "a personal agent host"}.get(word.lower(), "not in the glossary") + " (glossary server)"


server.run()
"""


def test_an_approved_mcp_server_restarts_the_sandbox_and_its_tool_works(make_settings, sqlite_url):
    """bwrap: the owner approves add_mcp_server from the card; the group's sandbox restarts on the
    same session (no image is built), the CLI starts the stdio server, the model gets its tool,
    calls it, and the SDK resumed the conversation."""
    def brain(req):
        prompt, results = req.current_prompt(), req.turn_tool_results()
        if "glossary" in prompt and "approved your proposal" not in prompt:
            if not results:
                return Reply.call("Bash", command="touch /tmp/old-sandbox && echo marked")
            if len(results) == 1:
                return Reply.call("mcp__nanoclaw__add_mcp_server", {
                    "name": "glossary", "command": "python3", "args": ["/workspace/group/glossary_server.py"],
                    "reason": "the team glossary"})
            return Reply.say("I asked for the glossary server.")
        if "approved your proposal" in prompt:
            if "mcp__glossary__lookup" not in req.tool_names():
                return Reply.say("after: no glossary tool " + ",".join(n for n in req.tool_names() if "nanoclaw" not in n))
            if not results:
                return Reply.call("mcp__glossary__lookup", word="NanoClaw")
            if len(results) == 1:
                return Reply.call("Bash", command="test -e /tmp/old-sandbox && echo OLD-SANDBOX || echo NEW-SANDBOX")
            remembered = any("what does nanoclaw mean" in t for t in req.user_texts())
            return Reply.say(f"after: {results[0].text} {results[1].text.strip()} remembered={remembered}")
        return Reply.say("?")

    with sandbox_service(make_settings, sqlite_url, brain) as svc:
        setup(svc)
        (svc.settings.groups_dir / "andy" / "glossary_server.py").write_text(GLOSSARY_SERVER)
        svc.post(message(111, OWNER, "the glossary: what does nanoclaw mean?"))
        card = wait_card(svc)
        assert "+ glossary: python3 /workspace/group/glossary_server.py" in shown(card)
        svc.wait(lambda: "I asked for the glossary server." in texts(svc.tg, 111), what="the agent's first reply")
        from nanoclaw.models import AgentGroup, Session
        session_id = Session.get().id

        svc.post(click(buttons(card)["✅ Approve"], OWNER, card))
        svc.wait(lambda: any(t.startswith("after:") for t in texts(svc.tg, 111)), timeout=120, what="the new turn")
        last = texts(svc.tg, 111)[-1]  # the tool's answer (mcp may wrap it as {"result": ...})
        assert "a personal agent host (glossary server)" in last and last.endswith("NEW-SANDBOX remembered=True")
        config = AgentGroup.get(AgentGroup.folder == "andy").container_config
        assert config["mcp_servers"]["glossary"]["args"] == ["/workspace/group/glossary_server.py"]
        assert "image" not in config  # no rebuild for an MCP server
        assert [s.id for s in Session.select()] == [session_id]
        assert edits(svc.tg)[-1]["text"].startswith("✅ Approved by Olivia: add the MCP server glossary")


def test_create_agent_is_offered_to_the_owners_dm_agent_and_not_to_a_group_agent(make_settings, sqlite_url):
    """What the model is offered, read from its request: a group chat's agent does not see
    create_agent (the host withholds it); the owner's DM agent does."""
    def script(req):
        offered = "mcp__nanoclaw__create_agent" in req.tool_names()
        return Reply.say("create_agent offered" if offered else "create_agent withheld")
    with sandbox_service(make_settings, sqlite_url, script) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
        svc.cli("wire", "telegram", "111", "andy", "--kind", "dm")
        svc.cli("wire", "telegram", "-100200", "andy", "--kind", "group")
        svc.post(message(-100200, OWNER, "hi", title="Team", mention=True))
        svc.post(message(111, OWNER, "hi"))
        svc.wait(lambda: texts(svc.tg, 111) and texts(svc.tg, -100200), what="both answers")
        assert texts(svc.tg, -100200) == ["create_agent withheld"]
        assert texts(svc.tg, 111) == ["create_agent offered"]


# --- the operator's own changes: the agent's page and the CLI ---------------------------------------

def test_the_page_allows_a_host_and_revokes_it_and_the_agents_next_request_follows(make_settings, sqlite_url, cert):
    """The owner allows a host on the agent's page: the agent's next request through the proxy passes,
    in the same sandbox; revoked, the next one is refused. Each change is audited with its why."""
    from tests.web.test_admin import PASSWORD, csrf_of, login
    with HttpsServer(cert) as site:
        host = f"127.0.0.1:{site.port}"
        fetch = f"{CURL} https://{host}/report 2>&1 | tail -n 25"

        def brain(req):
            if not req.turn_tool_results():
                return Reply.call("Bash", command=fetch)
            return Reply.say("ok" if '"ok": true' in req.turn_tool_results()[-1].text else "refused")

        with sandbox_service(make_settings, sqlite_url, brain) as svc:
            setup(svc, cert)
            svc.app.test_cli_runner().invoke(args=["nanoclaw", "admin", "set-password", "telegram:111"],
                                             input=f"{PASSWORD}\n{PASSWORD}\n")
            page = svc.app.test_client()
            assert login(page, "telegram:111").status_code == 302

            def change(path, **form):
                token = csrf_of(page.get("/admin/agents/andy").get_data(as_text=True))
                return page.post(path, data={"csrf_token": token, **form})

            def ask(text, n):
                svc.post(message(111, OWNER, text))
                svc.wait(lambda: len(texts(svc.tg, 111)) >= n, what=f"answer {n}")
                return texts(svc.tg, 111)[-1]
            assert ask("fetch the report", 1) == "refused"
            assert change("/admin/agents/andy/egress", host=host, why="the weekly report").status_code == 302
            assert f"<code>{host}</code>" in page.get("/admin/agents/andy").get_data(as_text=True)
            assert ask("fetch it now", 2) == "ok"
            assert change("/admin/agents/andy/egress/remove", host=host, why="done with it").status_code == 302
            assert ask("and once more", 3) == "refused"
            assert [r["path"] for r in site.requests] == ["/report"]
            added, removed = (AuditLog.get(AuditLog.action == a) for a in ("egress.add", "egress.remove"))
            assert (added.actor, added.detail["why"], added.detail["diff"]) == ("telegram:111", "the weekly report",
                                                                                [f"+ {host}"])
            assert (removed.detail["why"], removed.detail["diff"]) == ("done with it", [f"- {host}"])
