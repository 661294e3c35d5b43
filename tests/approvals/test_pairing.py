"""Pairing (issue 16): claim the bot from a DM with a one-time code, without knowing your user id.

The code comes from the real CLI; the DM goes through the real Telegram webhook (and Slack's, for
"any platform"); what the person sees is read back from the fake platform APIs."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given, strategies as st

from nanoclaw.approvals import pairing
from nanoclaw.models import AgentGroupMember, MessagingGroup, PairingCode, UserRole, Wiring, utcnow
from tests.inbound.test_intake import session_texts
from tests.tg_flow import message, person, post, telegram_app, texts, tg  # noqa: F401  (tg is a fixture)

ANNA, BOB = person(4242, "Anna"), person(5151, "Bob")


@pytest.fixture
def app(make_settings, db_url, tg):  # noqa: F811
    with telegram_app(make_settings, db_url, tg) as app:
        yield app


def cli(app, *args):
    return app.test_cli_runner().invoke(args=["nanoclaw", *args])


def new_code(app, *args) -> str:
    result = cli(app, "pair", *args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if re.fullmatch(r"[A-Z0-9]+", line)]
    assert len(lines) == 1, result.output  # the code stands on a line of its own
    return lines[0]


def roles_of(user_id: str) -> set[str]:
    found = {r.role for r in UserRole.select().where(UserRole.user == user_id)}
    if AgentGroupMember.select().where(AgentGroupMember.user == user_id).exists():
        found.add("member")
    return found


def wired(chat_id: int) -> bool:
    mg = MessagingGroup.get_or_none(MessagingGroup.channel_type == "telegram", MessagingGroup.platform_id == str(chat_id))
    return mg is not None and Wiring.select().where(Wiring.messaging_group == mg).exists()


# --- pure ------------------------------------------------------------------------------------

def test_codes_have_no_look_alikes():
    codes = {pairing.make_code() for _ in range(200)}
    assert len(codes) == 200
    for code in codes:
        assert 6 <= len(code) <= 10 and not set(code) & set("0O1IL"), code


@given(st.text(max_size=30))
def test_only_a_whole_code_is_a_code(text):
    code = pairing.as_code(text)
    assert code is None or (len(code) == pairing.LENGTH and set(code) <= set(pairing.ALPHABET))


def test_a_code_typed_by_hand_is_read():
    assert pairing.as_code(" abcd-efgh ") == "ABCDEFGH"
    assert pairing.as_code("abcd efgh") == "ABCDEFGH"
    assert pairing.as_code("ABCDEFG0") is None and pairing.as_code("see you at ABCDEFGH") is None


def test_the_first_person_becomes_owner_then_members():
    assert pairing.role_given(None, has_owner=False) == "owner"
    assert pairing.role_given(None, has_owner=True) == "member"
    assert pairing.role_given("admin", has_owner=False) == "admin"


# --- the command -----------------------------------------------------------------------------

def test_pair_on_an_empty_install_creates_the_default_agent(app):
    code = new_code(app)
    assert PairingCode.select().count() == 1
    assert code not in str([r.code_hash for r in PairingCode.select()])  # only its hash is kept
    assert cli(app, "agent", "list").output.count("andy") == 1


def test_pair_with_several_agents_asks_which(app):
    assert cli(app, "agent", "create", "Andy").exit_code == 0
    assert cli(app, "agent", "create", "Bea").exit_code == 0
    result = cli(app, "pair")
    assert result.exit_code == 2 and "several agents" in result.output and "Traceback" not in result.output
    assert cli(app, "pair", "--minutes", "0").exit_code == 2
    new_code(app, "bea", "--role", "admin")


# --- end to end through the DM ---------------------------------------------------------------

def test_the_first_dm_with_the_code_pairs_and_then_the_agent_answers(app, tg):  # noqa: F811
    code = new_code(app)
    post(app, message(4242, ANNA, code.lower()))
    assert roles_of("telegram:4242") == {"owner"}
    assert wired(4242)
    assert texts(tg, 4242)[-1].startswith("Paired: you are the owner")
    assert session_texts(app) == []  # the code itself never reaches the agent
    post(app, message(4242, ANNA, "hello Andy"))
    assert session_texts(app) == ["hello Andy"]

    post(app, message(5151, BOB, code))  # the code is spent
    assert texts(tg, 5151) == [pairing.NEUTRAL] and roles_of("telegram:5151") == set() and not wired(5151)

    second = new_code(app)  # an owner exists now: the next person is a member
    post(app, message(5151, BOB, second))
    assert roles_of("telegram:5151") == {"member"} and wired(5151)


def test_a_wrong_or_expired_code_gets_the_same_answer_and_guessing_is_stopped(app, tg):  # noqa: F811
    code = new_code(app)
    expired = new_code(app)
    PairingCode.update(expires_at=utcnow() - timedelta(seconds=1)).where(
        PairingCode.code_hash == pairing.digest(expired)).execute()
    post(app, message(5151, BOB, expired))
    post(app, message(5151, BOB, "ABCDEFGH"))
    assert texts(tg, 5151) == [pairing.NEUTRAL, pairing.NEUTRAL]
    for _ in range(pairing.FAILED_LIMIT - 2):
        post(app, message(5151, BOB, "HJKMNPQR"))
    post(app, message(5151, BOB, code))  # even the right code, once the limit is reached
    assert texts(tg, 5151)[-1] == pairing.LIMITED
    assert roles_of("telegram:5151") == set() and not wired(5151)
    post(app, message(4242, ANNA, code))  # someone else still can
    assert roles_of("telegram:4242") == {"owner"}


def test_a_message_shaped_like_a_code_is_ordinary_when_no_pairing_is_going_on(app, tg):  # noqa: F811
    assert cli(app, "agent", "create", "Andy").exit_code == 0
    assert cli(app, "user", "add", "telegram:4242", "--role", "owner").exit_code == 0
    assert cli(app, "wire", "telegram", "4242", "andy").exit_code == 0
    post(app, message(4242, ANNA, "THURSDAY"))
    assert session_texts(app) == ["THURSDAY"]
    assert texts(tg, 4242) == []


def test_pairing_in_a_group_is_not_taken(app, tg):  # noqa: F811
    code = new_code(app)
    post(app, message(-100777, ANNA, code, title="Team"))
    assert roles_of("telegram:4242") == set() and texts(tg, -100777) == []
    assert PairingCode.get().used_at is None
