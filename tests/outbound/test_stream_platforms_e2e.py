"""The answer streamed on Slack and Discord, end to end (the real runner in a bubblewrap sandbox, the
scripted model writing word by word, each platform's fake at HTTP): a DM shows one message that grows
(Slack `chat.update`, Discord's PATCH), a Slack channel's thread Slack's own stream (chat.startStream,
appendStream, stopStream, the person answered as its recipient); the finished answer comes once as a
new message, and the growing one is deleted. (Telegram: test_stream_e2e.py; Matrix against Synapse: tests/platforms/test_matrix_e2e.py.)"""
from __future__ import annotations

import copy

import pytest

from tests.fakes.discord_api import BOT_ID, FakeDiscord
from tests.fakes.discord_api import TOKEN as DISCORD_TOKEN
from tests.fakes.model_api import Reply
from tests.fakes.slack_api import TOKEN as SLACK_TOKEN, FakeSlack
from tests.outbound.test_progress_e2e import Discord, Slack
from tests.platforms.kits import DISCORD_KEY, KITS, SLACK_SECRET
from tests.platforms.test_contract import fixture
from tests.tg_flow import sandbox_service

ANSWER = " ".join(f"s{i:03x}" for i in range(240))  # 7 s at one word every 30 ms


def brain(req) -> Reply:
    return Reply.say(ANSWER, chunk_delay_s=0.03) if "write" in req.current_prompt() else Reply.say("Hi.")


@pytest.mark.parametrize("platform", ["slack", "discord"])
def test_a_dm_sees_one_message_grow_then_the_answer_once(make_settings, sqlite_url, platform):
    with FakeSlack() as slack, FakeDiscord() as discord, sandbox_service(
            make_settings, sqlite_url, brain, NANOCLAW_PROGRESS_EDIT_S=1,
            SLACK_BOT_TOKEN=SLACK_TOKEN, SLACK_SIGNING_SECRET=SLACK_SECRET, SLACK_API_BASE=slack.api,
            SLACK_BOT_USER_ID="U0BOTANDY", DISCORD_BOT_TOKEN=DISCORD_TOKEN, DISCORD_API_BASE=discord.url,
            DISCORD_PUBLIC_KEY=DISCORD_KEY.verify_key.encode().hex(), DISCORD_APPLICATION_ID=BOT_ID) as svc:
        chat = Slack(svc, slack) if platform == "slack" else Discord(svc, discord)
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", chat.user, "--role", "owner", "--name", "Olivia")
        svc.cli("wire", platform, chat.chat, "andy", "--kind", "dm")
        chat.say("hello")
        svc.wait(lambda: any(t == "Hi." for _i, t in chat.sent()), timeout=120, what="the first answer")
        chat.say("write the essay")
        svc.wait(lambda: any(t == ANSWER for _i, t in chat.sent()), timeout=120, what="the answer")
        edited = {i for i, _t in chat.edits()}
        assert len(edited) == 1, chat.edits()  # one growing message
        [live_id] = edited
        grown = [t for i, t in chat.edits() if i == live_id]
        assert len(grown) >= 2 and all(ANSWER.startswith(t) for t in grown), grown
        assert [len(t) for t in grown] == sorted(len(t) for t in grown)
        assert len(grown[0]) < len(ANSWER) // 2  # seen long before the end
        assert [t for i, t in chat.sent() if i != live_id].count(ANSWER) == 1  # the answer: once, its own message
        svc.wait(lambda: live_id in chat.deleted(), what="the growing message deleted")


def test_a_slack_channel_thread_streams_with_slacks_own_methods(make_settings, sqlite_url):
    with FakeSlack() as slack, sandbox_service(
            make_settings, sqlite_url, brain, NANOCLAW_PROGRESS_EDIT_S=1, SLACK_BOT_TOKEN=SLACK_TOKEN,
            SLACK_SIGNING_SECRET=SLACK_SECRET, SLACK_API_BASE=slack.api, SLACK_BOT_USER_ID="U0BOTANDY") as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", "slack:U0ALICE01", "--role", "owner", "--name", "Alice")
        svc.cli("wire", "slack", "C0GENERAL", "andy", "--kind", "thread")
        payload = copy.deepcopy(fixture("slack", "channel_message_mention"))
        payload["event"]["text"] = "<@U0BOTANDY> write the essay"
        assert KITS["slack"].post(svc.app.test_client(), payload).status_code == 200
        svc.app.extensions["nanoclaw.intake"].wait_idle(30)
        asked = payload["event"]["ts"]
        svc.wait(lambda: [m for m in list(slack.posted) if m["text"] == ANSWER], timeout=120, what="the answer")
        [answer] = [m for m in list(slack.posted) if m["text"] == ANSWER]
        assert answer.get("thread_ts") == asked  # the finished answer: a new message in the thread, once
        [start] = slack.calls("chat.startStream")
        [stream] = list(slack.streams.values())  # the live answer: one stream in the thread, for Alice
        assert stream["thread_ts"] == asked and ANSWER.startswith(stream["text"])
        assert len(start["markdown_text"]) < len(ANSWER) // 2  # it began long before the end
        assert (start["recipient_user_id"], start["recipient_team_id"]) == ("U0ALICE01", "T0TEAM001")
        assert slack.calls("chat.appendStream") and not [u for u in slack.calls("chat.update")]
        svc.wait(lambda: [d for d in slack.calls("chat.delete") if d["ts"] == stream["ts"]],
                 what="the stream stopped and deleted")
        assert not stream["streaming"]
