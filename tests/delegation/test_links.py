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
