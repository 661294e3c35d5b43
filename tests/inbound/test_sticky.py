"""mention-sticky (issue 17): a thread sticks only once a message in it engaged the agent. With
`--ignored accumulate`, an unmentioned first message is kept as context but must not make the agent
answer the next unmentioned one. Real Telegram forum-topic updates through the real webhook."""
from __future__ import annotations

import pytest

from nanoclaw.inbound.decide import is_sticky
from nanoclaw.models import Session
from tests.tg_flow import message, person, post, telegram_app, tg  # noqa: F401  (tg is a fixture)

ANNA = person(4242, "Anna")
GROUP = -1001500


@pytest.fixture
def app(make_settings, db_url, tg):  # noqa: F811
    with telegram_app(make_settings, db_url, tg, ("agent", "create", "Andy"),
                      ("user", "add", "telegram:4242", "--role", "owner"),
                      ("wire", "telegram", str(GROUP), "andy", "--kind", "thread", "--ignored", "accumulate")) as app:
        yield app


def say(app, text: str, topic: int, mention: bool = False) -> bool:
    """Post it; whether the agent was woken to answer."""
    woken = len(app.woken)
    post(app, message(GROUP, ANNA, text, title="Team", topic=topic, mention=mention))
    return len(app.woken) > woken


def test_a_thread_sticks_only_after_an_engaging_message(app):
    assert not say(app, "just chatting", topic=7)      # kept as context, not answered
    assert Session.select().count() == 1
    assert not say(app, "still chatting", topic=7)     # the old code answered this one
    assert say(app, "what do you think?", topic=7, mention=True)
    assert say(app, "and now?", topic=7)               # sticky from the mention on
    assert not say(app, "another thread", topic=8)     # other threads are not


def test_is_sticky():
    assert not is_sticky(None)
    assert not is_sticky(Session(status="active", engaged_at=None))
    assert is_sticky(Session(status="active", engaged_at="2026-11-25T10:00:00"))
    assert not is_sticky(Session(status="closed", engaged_at="2026-11-25T10:00:00"))
