"""Agent questions: the ask_user_question tool through the real runner (bwrap sandbox, real SDK,
fake model) → a card at the fake Telegram → a click webhook → the tool returns the answer (or the
timeout); the host side alone (cards, who may answer, first answer wins, expiry); send_card."""
from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest

from nanoclaw.outbound.delivery import deliver_session
from nanoclaw.models import AuditLog, PendingQuestion, Session
from nanoclaw.approvals.questions import deliver_question
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions.store import Target
from tests.fakes.model_api import Reply
from tests.tg_flow import tg  # noqa: F401  (the fake Bot API fixture)
from tests.tg_flow import (OLIVIA_AND_ANDY, telegram_app, buttons, cards, click, edits, message, person, post,
                           sandbox_service, shown, texts, toasts)

from agent_runner.config import RunnerConfig  # noqa: E402  (container/ is on sys.path via session_schema)
from agent_runner.mcp_tools import ToolContext, call_tool  # noqa: E402
from agent_runner.mcp_tools.context import ToolError  # noqa: E402
from agent_runner.mcp_tools.interactive import (ask_user_question, clamp_timeout, clean_options,  # noqa: E402
                                                find_answer, send_card)
from agent_runner.store import SessionStore  # noqa: E402

OWNER, ADA = person(111, "Olivia"), person(666, "Ada")
ASK = "mcp__nanoclaw__ask_user_question"


# --- pure ------------------------------------------------------------------------------------

def test_options_are_short_distinct_buttons():
    assert clean_options(["Pizza", "  Sushi  bar "]) == ["Pizza", "Sushi bar"]
    assert clean_options('["Yes", "No"]') == ["Yes", "No"]
    for bad in ([], ["x"] * 2, [f"o{i}" for i in range(11)], ["y" * 81], "not a list at all {"):
        with pytest.raises(ToolError):
            clean_options(bad if bad != "not a list at all {" else 5)


def test_timeout_stays_inside_one_turn():
    assert clamp_timeout(300, 600) == 300
    assert clamp_timeout(5000, 600) == 570
    assert clamp_timeout(0, 600) == 1
    with pytest.raises(ToolError):
        clamp_timeout("soon", 600)
    # no cap on the turn (the default): inside what the host lets a silent turn last (30 min)
    assert clamp_timeout(600, None) == 600
    assert clamp_timeout(5000, None) == 30 * 60 - 30


# --- the host side, without a sandbox ---------------------------------------------------------

@pytest.fixture
def app(make_settings, db_url, tg):
    with telegram_app(make_settings, db_url, tg, *OLIVIA_AND_ANDY) as app:
        yield app


def ask(app, title="Lunch", question="Pizza or sushi?", options=("Pizza", "Sushi"), seconds=60,
        target=Target("telegram", "111")):
    """What the tool writes: a question row in the session's outbound.db (as the agent would)."""
    post(app, message(111, OWNER, "plan lunch"))
    session = Session.get()
    path = app.config["NANOCLAW"].sessions_dir / "andy" / session.id
    agent = SessionStore.of_session(path)
    qid = f"q{time.monotonic_ns()}"
    expires = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    agent.write_out({"op": "question", "question_id": qid, "title": title, "question": question,
                     "options": list(options), "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%S.000Z")}, target)
    agent.close()
    deliver_session(path, app.config["NANOCLAW"])
    return path, qid


def answers(path) -> list[dict]:
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    try:
        return [dict(r, content=json.loads(r["content"])) for r in
                conn.execute("SELECT * FROM messages_in WHERE kind = 'answer'")]
    finally:
        conn.close()


def test_question_card_answered_once_by_someone_the_agent_knows(app, tg):
    path, qid = ask(app)
    [card] = cards(tg)
    assert str(card["chat_id"]) == "111" and "Lunch" in shown(card) and "Pizza or sushi?" in shown(card)
    choice = buttons(card)
    assert list(choice) == ["Pizza", "Sushi"]

    post(app, click(choice["Sushi"], ADA, card))  # a stranger to the agent
    assert toasts(tg)[-1] == "Only Olivia (who was asked) or an admin of this agent can answer this."
    post(app, click(choice["Sushi"], OWNER, card))
    assert toasts(tg)[-1] == "You chose: Sushi"
    assert edits(tg)[-1]["text"] == "Lunch\nPizza or sushi?\n\n✅ Olivia chose: Sushi"
    [row] = answers(path)
    assert (row["content"]["question_id"], row["content"]["answer"], row["content"]["option_index"]) == (qid, "Sushi", 1)
    assert row["content"]["sender"] == "Olivia" and row["trigger"] == 1
    assert app.woken[-1] == "andy"
    post(app, click(choice["Pizza"], OWNER, card))
    assert toasts(tg)[-1] == "Already answered: Sushi."
    assert len(answers(path)) == 1
    assert AuditLog.select().where(AuditLog.action == "question.answer").count() == 1


def test_a_click_after_the_timeout_is_told_the_question_expired(app, tg):
    path, _ = ask(app, seconds=-1)
    [card] = cards(tg)
    post(app, click(buttons(card)["Pizza"], OWNER, card))
    assert toasts(tg)[-1] == "This question expired; the agent has moved on."
    assert edits(tg)[-1]["text"] == "Lunch\nPizza or sushi?\n\n⏱ Expired: no answer came in time."
    assert answers(path) == []


def test_a_question_row_applied_again_sends_no_second_card(app, tg):
    path, qid = ask(app)
    pq = PendingQuestion.get()
    from nanoclaw.outbound.delivery import Outgoing
    row = Outgoing("x", 1, None, Target("telegram", "111"), {"op": "question", "question_id": qid, "question": "?",
                                                            "options": ["a"]})
    assert deliver_question(path, row, app.config["NANOCLAW"]) == pq.card_message_id
    assert len(cards(tg)) == 1


def test_a_question_for_another_chat_is_refused(app, tg):
    path, _ = ask(app, target=Target("telegram", "-100999"))
    assert cards(tg) == [] and not PendingQuestion.select().exists()
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    assert [r[0] for r in conn.execute("SELECT status FROM delivered")] == ["failed"]
    conn.close()


def test_the_tool_reads_the_answer_and_marks_it_done(tmp_path):
    """The tool function itself against a session folder, the host's part played by hand."""
    import threading
    from nanoclaw.sessions import store as host_store
    host_store.prepare(tmp_path, host_store.Target("telegram", "111"))
    config = RunnerConfig.from_env({"NANOCLAW_SESSION_DIR": str(tmp_path), "NANOCLAW_TURN_TIMEOUT_S": "60"})
    agent = SessionStore.of_session(tmp_path)
    ctx = ToolContext(store=agent, config=config)

    def host():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rows = agent.out.execute("SELECT content FROM messages_out").fetchall()
            if rows:
                qid = json.loads(rows[0][0])["question_id"]
                host_store.write_message(tmp_path, kind="answer", target=None, message_id=f"answer:{qid}",
                                         content={"question_id": qid, "answer": "No", "option_index": 1,
                                                  "sender": "Olivia"})
                return
            time.sleep(0.05)
    threading.Thread(target=host, daemon=True).start()
    result = call_tool(ctx, ask_user_question, {"title": "Go?", "question": "Shall I?", "options": ["Yes", "No"]})
    assert result["content"][0]["text"] == "Olivia answered: No (option 2 of 2)."
    conn = schema.connect(tmp_path / "host" / schema.INBOUND, readonly=True)
    answer_id = conn.execute("SELECT id FROM messages_in WHERE kind = 'answer'").fetchone()[0]
    assert find_answer(conn, "nope") is None
    conn.close()
    assert agent.acked_ids([answer_id]) == {answer_id}  # the loop will not take it for a new message
    assert "No answer within 1 s" in call_tool(ctx, ask_user_question, {
        "title": "", "question": "Again?", "options": ["Yes"], "timeout": 1})["content"][0]["text"]
    assert call_tool(ctx, send_card, {"card": {"title": "Hi", "body": "there"}})["content"][0]["text"].startswith(
        "Card sent")
    agent.close()


# --- the whole way: the real runner in a sandbox ----------------------------------------------

def asks_then_says(seconds: int):
    def script(req):
        results = req.turn_tool_results()
        if not results:
            return Reply.call(ASK, title="Lunch", question="Pizza or sushi?", options=["Pizza", "Sushi"],
                              timeout=seconds)
        return Reply.say(f"Noted. {results[-1].text}")
    return script


def setup_owner(svc):
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    svc.cli("wire", "telegram", "111", "andy")


def test_agent_asks_the_owner_answers_and_the_agent_goes_on(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, asks_then_says(60)) as svc:
        setup_owner(svc)
        svc.post(message(111, OWNER, "plan lunch for us"))
        card = svc.wait(lambda: next(iter(cards(svc.tg)), None), what="the question card")
        assert "Pizza or sushi?" in shown(card)
        clicked = time.monotonic()
        svc.post(click(buttons(card)["Pizza"], OWNER, card))
        svc.wait(lambda: texts(svc.tg, 111), what="the agent's reply")
        answered_in = time.monotonic() - clicked
        assert texts(svc.tg, 111) == ["Noted. Olivia answered: Pizza (option 1 of 2)."]
        assert answered_in < 5, answered_in
        sentinel = svc.settled(111, OWNER)  # the answer row must not start a turn of its own
        assert len(svc.model.model_calls()) == 3 and "Pizza" not in sentinel.current_prompt()
        assert texts(svc.tg, 111)[:-1] == ["Noted. Olivia answered: Pizza (option 1 of 2)."]


def test_nobody_answers_the_tool_returns_and_a_late_click_is_refused(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, asks_then_says(2)) as svc:
        setup_owner(svc)
        svc.post(message(111, OWNER, "plan lunch for us"))
        card = svc.wait(lambda: next(iter(cards(svc.tg)), None), what="the question card")
        svc.wait(lambda: texts(svc.tg, 111), what="the agent's reply after the timeout")
        [reply] = texts(svc.tg, 111)
        assert reply.startswith("Noted. No answer within 2 s; the question has expired")
        svc.post(click(buttons(card)["Sushi"], OWNER, card))
        assert toasts(svc.tg)[-1] == "This question expired; the agent has moved on."
        assert edits(svc.tg)[-1]["text"].endswith("⏱ Expired: no answer came in time.")


def test_send_card_shows_a_display_only_card(make_settings, sqlite_url):
    script = [Reply.call("mcp__nanoclaw__send_card", card={"title": "Weather", "body": "Sunny, 21°C"}),
              Reply.say("There you go.")]
    with sandbox_service(make_settings, sqlite_url, script) as svc:
        setup_owner(svc)
        svc.post(message(111, OWNER, "weather card please"))
        svc.wait(lambda: len(texts(svc.tg, 111)) == 2, what="the card and the agent's reply")
        sent = [m for m in svc.tg.messages if str(m["chat_id"]) == "111"]
        assert [(m["text"], m.get("reply_markup")) for m in sent] == [
            ("<b>Weather</b>\n\nSunny, 21°C", None), ("There you go.", None)]


def test_send_card_with_buttons_does_not_wait_and_a_press_comes_back_as_a_message(make_settings, sqlite_url):
    def script(req):
        prompt = req.current_prompt()
        if "[button]" in prompt:
            return Reply.say("You chose Thursday." if "value: thu" in prompt else f"Unexpected: {prompt[-200:]}")
        if not req.turn_tool_results():
            return Reply.call("mcp__nanoclaw__send_card", card={"title": "Meeting", "body": "Which day?"},
                              buttons=[{"label": "Wednesday", "value": "wed"}, {"label": "Thursday", "value": "thu"}])
        return Reply.say("Pick a day on the card.")
    with sandbox_service(make_settings, sqlite_url, script) as svc:
        setup_owner(svc)
        svc.post(message(111, OWNER, "when shall we meet?"))
        svc.wait(lambda: "Pick a day on the card." in texts(svc.tg, 111), what="the turn to end without waiting")
        card = svc.wait(lambda: cards(svc.tg), what="the card")[0]
        labels = buttons(card)
        assert list(labels) == ["Wednesday", "Thursday"]
        assert all(data.startswith("nac-") for data in labels.values())  # the host's ids, not the agent's
        svc.post(click(labels["Thursday"], OWNER, card))
        svc.wait(lambda: "You chose Thursday." in texts(svc.tg, 111), what="the press to reach the agent")


def test_card_buttons_are_checked_in_the_tool():
    from agent_runner.mcp_tools.interactive import clean_card_buttons
    assert clean_card_buttons(None) == []
    assert clean_card_buttons(["Yes", {"label": "No", "value": "n"}]) == [
        {"label": "Yes", "value": "Yes"}, {"label": "No", "value": "n"}]
    for bad, says in (([{"label": "A"}] * 2, "make each label different"), ([{"label": ""}], "1 to 80"),
                      ([{"label": str(i)} for i in range(11)], "1 to 10"), ("{not json", "list of")):
        with pytest.raises(ToolError, match=says):
            clean_card_buttons(bad)


def test_the_agent_reacts_to_the_message_it_is_answering(make_settings, sqlite_url):
    script = [Reply.call("mcp__nanoclaw__add_reaction", emoji="👍"), Reply.say("On it.")]
    with sandbox_service(make_settings, sqlite_url, script) as svc:
        setup_owner(svc)
        update = message(111, OWNER, "please book the table")
        svc.post(update)
        svc.wait(lambda: "On it." in texts(svc.tg, 111), what="the answer")
        reaction = svc.wait(lambda: svc.tg.calls("setMessageReaction"), what="the reaction")[0]
        assert str(reaction["chat_id"]) == "111"
        assert str(reaction["message_id"]) == str(update["message"]["message_id"])  # the person's message
        assert reaction["reaction"] == [{"type": "emoji", "emoji": "👍"}]
