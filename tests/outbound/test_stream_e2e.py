"""The answer streamed into Telegram as the model writes it, end to end: the real runner in a bubblewrap
sandbox (real SDK and CLI) reading a scripted model that streams word by word, the host's live
message against the fake Bot API. A private chat sees drafts (sendMessageDraft), a group one message
edited in place; either way the finished answer arrives once, whole, as a message of its own, and a
group's live message is deleted. A live message that fails (429 on every third edit, deleted by the
person, past 4,096 characters) costs nothing of the answer."""
from __future__ import annotations

import threading

from tests.fakes.model_api import Reply
from tests.tg_flow import message, person, sandbox_service, sent

OLIVIA = person(111, "Olivia")


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i:03x}" for i in range(n))


# 20 s at 40 words a second (each word a stream event), as a person sees a long answer written: 3,999
# characters, one Telegram message
LONG = words(800, "w")
SHORT = {-1001: words(400, "a"), -1002: words(400, "b"), -1003: words(1800, "c")}  # 8,999 characters


def brain(req):
    prompt = req.current_prompt()
    if "essay" in prompt:
        return Reply.say(LONG, chunk_delay_s=0.025)
    for chat, text in SHORT.items():
        if f"chat {chat}" in prompt:
            return Reply.say(text, chunk_delay_s=0.008 if chat == -1003 else 0.025)
    return Reply.say("Hi.")


def in_chat(svc, chat) -> list[dict]:
    return [m for m in sent(svc.tg) if str(m.get("chat_id")) == str(chat)]


def calls_in(svc, method, chat) -> list[dict]:
    return [c for c in svc.tg.calls(method) if str(c.get("chat_id")) == str(chat)]


def setup(svc, *groups):
    svc.cli("agent", "create", "Andy")
    svc.cli("user", "add", "telegram:111", "--role", "owner", "--name", "Olivia")
    svc.cli("wire", "telegram", "111", "andy")
    for chat in groups:
        svc.cli("wire", "telegram", str(chat), "andy", "--kind", "group")


def live_ids(svc, chat) -> set[int]:
    """The live message(s) of a chat: those the host edited or deleted, accepted or not."""
    return {int(svc.tg.params(r)["message_id"]) for r in list(svc.tg.requests)
            if svc.tg.method_of(r) in ("editMessageText", "deleteMessage")
            and str(svc.tg.params(r).get("chat_id")) == str(chat)}


def answered_once(svc, chat, answer) -> bool:
    """The answer is in the chat once and whole (in parts where it is longer than one message)."""
    live = live_ids(svc, chat)
    texts = [m["text"] for m in in_chat(svc, chat) if m["_message_id"] not in live]
    texts = [t for t in texts if not (answer.startswith(t) and len(t) < 300)]  # a live message not yet edited
    return " ".join(t.strip() for t in texts) == answer


def test_a_private_chat_sees_drafts_and_a_group_one_live_message_then_the_answer_once(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, brain, NANOCLAW_PROGRESS_EDIT_S=1) as svc:
        setup(svc, -100500)
        svc.post(message(111, OLIVIA, "hello"))  # a warm sandbox for the DM
        svc.wait(lambda: [m for m in in_chat(svc, 111) if m["text"] == "Hi."], timeout=120, what="the first answer")
        svc.post(message(111, OLIVIA, "write the essay"))
        svc.post(message(-100500, OLIVIA, "write the essay", title="Team", mention=True))
        for chat in (111, -100500):
            svc.wait(lambda: [m for m in in_chat(svc, chat) if m["text"] == LONG], timeout=180,
                     what=f"the answer in {chat}")
        # the private chat: drafts of the answer so far, one draft id, and only the answer as a message
        drafts = calls_in(svc, "sendMessageDraft", 111)
        assert len(drafts) >= 3 and len({d["draft_id"] for d in drafts}) == 1, drafts
        assert all(LONG.startswith(d["text"]) for d in drafts), drafts  # only ever the answer's own words
        assert len([d for d in drafts if len(d["text"]) < len(LONG) // 2]) >= 2  # seen long before the end
        assert [m["text"] for m in in_chat(svc, 111)] == ["Hi.", LONG]
        # the group: one live message, edited as it grew, deleted once the answer came
        live, *rest = in_chat(svc, -100500)
        assert LONG.startswith(live["text"]) and len(live["text"]) < len(LONG) and [m["text"] for m in rest] == [LONG]
        edits = calls_in(svc, "editMessageText", -100500)
        assert len(edits) >= 3 and all(int(e["message_id"]) == live["_message_id"] for e in edits)
        grown = [len(e["text"]) for e in edits]
        assert grown == sorted(grown)
        svc.wait(lambda: [d for d in calls_in(svc, "deleteMessage", -100500)
                          if int(d["message_id"]) == live["_message_id"]], what="the live message deleted")
        assert not calls_in(svc, "sendMessageDraft", -100500)  # drafts are for private chats only


def test_a_live_message_that_fails_costs_nothing_of_the_answer(make_settings, sqlite_url):
    edits_seen: dict[str, int] = {}
    lock = threading.Lock()

    def every_third_edit(r) -> bool:
        params = r.json or r.form or {}
        if r.path.endswith("/editMessageText") and str(params.get("chat_id")) == "-1001":
            with lock:
                edits_seen["-1001"] = edits_seen.get("-1001", 0) + 1
                return edits_seen["-1001"] % 3 == 0
        return False

    def deleted_by_the_person(r) -> bool:  # after its first edit the person deleted the live message
        params = r.json or r.form or {}
        if str(params.get("chat_id")) != "-1002" or not r.path.endswith(("/editMessageText", "/deleteMessage")):
            return False
        with lock:
            edits_seen["-1002"] = edits_seen.get("-1002", 0) + 1
            return edits_seen["-1002"] > 1

    with sandbox_service(make_settings, sqlite_url, brain, NANOCLAW_PROGRESS_EDIT_S=1) as svc:
        setup(svc, *SHORT)
        svc.tg.fail_next(429, {"ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1",
                               "parameters": {"retry_after": 1}}, times=1000, match=every_third_edit)
        svc.tg.fail_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: message to edit not found"},
                         times=1000, match=deleted_by_the_person)
        for chat in SHORT:
            svc.post(message(chat, OLIVIA, f"write for chat {chat}", title=f"Team {chat}", mention=True))
        for chat, answer in SHORT.items():
            svc.wait(lambda: answered_once(svc, chat, answer), timeout=180, what=f"the answer in {chat}")
        # 429s came and were waited out: the live message went on being edited, then was deleted
        assert edits_seen.get("-1001", 0) >= 3
        live = in_chat(svc, -1001)[0]
        assert SHORT[-1001].startswith(live["text"]) and live["text"] != SHORT[-1001]
        svc.wait(lambda: calls_in(svc, "deleteMessage", -1001), what="the live message deleted")
        # deleted by the person: one refused edit, then no more calls for that message
        refused = [r for r in list(svc.tg.requests) if r.status == 400 and r.path.endswith("/editMessageText")]
        assert len(refused) == 1, refused
        # past 4,096 characters: the live message stops growing; the answer comes in parts, each once
        assert all(len(e["text"]) <= 4096 for e in calls_in(svc, "editMessageText", -1003))
        for chat, answer in SHORT.items():
            assert answered_once(svc, chat, answer)
