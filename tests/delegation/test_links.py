"""Links and asks decided from the host's records (issue 65): the pure rules (no link, the ask mode not
built, loops, depth), the op forced without a link refused with nothing written into the other agent,
ask_agent withheld without a link, and `agent link|unlink|links`."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from nanoclaw.delegation import ops
from nanoclaw.delegation.decide import MAX_DEPTH, refusal, wait_seconds
from nanoclaw.delegation.tables import AgentAsk
from nanoclaw.models import Session
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target

FOLDERS = st.sampled_from(["andy", "finance", "ops", "legal", "hr"])


@given(chain=st.lists(FOLDERS, max_size=5, unique=True), asker=FOLDERS, asked=FOLDERS)
def test_a_chain_never_loops_and_never_goes_deeper_than_allowed(chain, asker, asked):
    why = refusal(asker, asked, "allowed", chain)
    full = chain if chain and chain[-1] == asker else [*chain, asker]
    if why is None:
        assert asked not in full and asked != asker and len(full) <= MAX_DEPTH
    else:
        assert asked in full or asked == asker or len(full) > MAX_DEPTH


def test_what_is_refused_and_why():
    assert "no link" in refusal("andy", "finance", None, [])
    assert refusal("andy", "finance", "ask", []) is None  # an ask link: the card decides (cards.py)
    assert "loop" in refusal("finance", "andy", "allowed", ["andy"])
    assert "at most 3" in refusal("c", "d", "allowed", ["a", "b", "x"])
    assert refusal("andy", "finance", "allowed", []) is None
    assert wait_seconds(True) == 600 and wait_seconds(5000) == 600 and wait_seconds(False) == 0


def test_the_op_forced_without_a_link_is_refused_and_writes_nothing(app, cli):
    settings = app.config["NANOCLAW"]
    for args in (("agent", "create", "Andy"), ("agent", "create", "Finance"), ("user", "add", "telegram:42", "--role",
                 "owner"), ("wire", "telegram", "42", "andy")):
        assert cli(*args).exit_code == 0
    from nanoclaw.models import AgentGroup, MessagingGroup
    andy = AgentGroup.get(AgentGroup.folder == "andy")
    chat = MessagingGroup.get(MessagingGroup.platform_id == "42")
    session = Session.create(id="s-andy", agent_group=andy, messaging_group=chat)
    path = store.session_path(settings.sessions_dir, "andy", session.id)
    store.prepare(path, Target("telegram", "42"))
    row = SimpleNamespace(id="r1", op={"op": "ask_agent", "request_id": "req1", "agent": "finance", "text": "hi"})
    ops.handle_ask(path, row, settings)
    conn = store.open_session_readonly(path)
    [(content,)] = conn.execute("SELECT content FROM messages_in WHERE id = 'answer:req1'").fetchall()
    assert "no link to finance" in content
    assert AgentAsk.select().count() == 0 and not Session.select().where(Session.thread_id == "link:andy").exists()
    assert ops.tools_withheld("andy", settings) == {"ask_agent"}

    assert cli("agent", "link", "andy", "finance", "--mode", "allowed").exit_code == 0
    assert ops.tools_withheld("andy", settings) == set()
    assert "andy" in cli("agent", "links").output
    assert cli("agent", "unlink", "andy", "finance").exit_code == 0
    again = cli("agent", "unlink", "andy", "finance")
    assert again.exit_code == 2 and "has no link" in again.output
    assert cli("agent", "link", "andy", "andy", "--mode", "allowed").exit_code == 2


@pytest.mark.parametrize("mode", ["sideways", ""])
def test_a_bad_mode_is_a_usage_error(app, cli, mode):
    assert cli("agent", "link", "a", "b", "--mode", mode).exit_code == 2


def test_usage_shows_what_an_agent_spent_answering_others(app, cli):
    from nanoclaw.models import AgentGroup
    from nanoclaw.usage import ledger, prices
    assert cli("agent", "create", "Finance").exit_code == 0
    finance = AgentGroup.get(AgentGroup.folder == "finance")
    Session.create(id="s-link", agent_group=finance, messaging_group=None, thread_id="link:andy")
    day = ledger.today(app.config["NANOCLAW"].timezone)
    price = prices.price_of("claude-sonnet-4-5", prices.load(None))
    ledger.record("finance", "s-link", "claude-sonnet-4-5", prices.Tokens(input=100_000), price, day)
    ledger.record("finance", "s-own", "claude-sonnet-4-5", prices.Tokens(input=100_000), price, day)
    out = cli("usage").output
    assert "of which answering other agents: finance for andy $0.30" in out, out


def test_a_waited_ask_past_even_the_allowance_is_told_busy_at_once(app, cli, monkeypatch):
    """Capacity 1 and two sandboxes running already (the asker's, and one let past the limit): a waited
    ask would wait in the queue behind the asker itself, so the asker hears "busy" now; without waiting,
    the ask is queued and its answer comes later."""
    from dataclasses import replace

    from nanoclaw.models import AgentGroup, MessagingGroup
    from nanoclaw.sandboxes.manager import SandboxManager
    from nanoclaw.sessions.wake import Wake
    from tests.sandboxes.test_sandbox_queue import MemoryRuntime

    settings = replace(app.config["NANOCLAW"], max_concurrent_containers=1)
    for args in (("agent", "create", "Andy"), ("agent", "create", "Finance"), ("user", "add", "telegram:42", "--role",
                 "owner"), ("wire", "telegram", "42", "andy"), ("agent", "link", "andy", "finance", "--mode", "allowed")):
        assert cli(*args).exit_code == 0
    manager = SandboxManager(settings, MemoryRuntime())
    for name in ("s-andy", "s-other"):
        manager.runtime.running.append(manager.name_of("andy", name))
    wake = Wake()
    wake.connect(lambda folder, session_id: manager.wake(folder, session_id), manager)
    monkeypatch.setattr(ops, "_wake", wake)
    andy = AgentGroup.get(AgentGroup.folder == "andy")
    session = Session.create(id="s-andy", agent_group=andy, messaging_group=MessagingGroup.get())
    path = store.session_path(settings.sessions_dir, "andy", session.id)
    store.prepare(path, Target("telegram", "42"))

    def ask(request_id: str, wait) -> str:
        row = SimpleNamespace(id=request_id, op={"op": "ask_agent", "request_id": request_id, "agent": "finance",
                                                 "text": "the budget?", "wait": wait})
        ops.handle_ask(path, row, settings)
        conn = store.open_session_readonly(path)
        try:
            return conn.execute("SELECT content FROM messages_in WHERE id = ?", (f"answer:{request_id}",)).fetchone()[0]
        finally:
            conn.close()

    assert "finance is busy" in ask("w1", True)
    assert manager.runtime.started == []
    assert "Its answer arrives as a message" in ask("w2", False)
    assert [q.folder for q in manager.queue] == ["finance"]
