"""How soon a streamed answer shows, against a scripted model that writes word by word.

    .venv/bin/python -m bench.stream [N]       (N answers per chat kind, default 5)

The real runner in a bubblewrap sandbox (real SDK and CLI), the host's delivery and live message,
the fake Bot API. The model writes WORDS words at one every WORD_S (5 s an answer). Per answer:
- first word → shown: from the model's first text event (its request's arrival plus the two events
  before the first word, each WORD_S apart) to the first text the person sees: a draft in a Telegram
  private chat, the live message in a group (which waits STREAM_AFTER_S, 0.5 s, on purpose: a quick
  answer never shows twice);
- last word → answer: from the model's last word to the finished answer's sendMessage;
- edits per answer in the group (NANOCLAW_PROGRESS_EDIT_S=1 here; 3 by default);
- the baseline, measured in the same run: the same answer with `--stream off`, where the first text
  the person sees is the finished answer.
"""
from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "container")]

from nanoclaw.config import Settings  # noqa: E402
from tests.fakes.model_api import Reply  # noqa: E402
from tests.tg_flow import Telegram, message, person, sandbox_service  # noqa: E402

WORDS, WORD_S = 200, 0.025
PACE_S = 1.5  # between answers: longer than the edit throttle (1 s here), which is per chat
OLIVIA = person(111, "Olivia")
ANSWER = " ".join(f"w{i:03x}" for i in range(WORDS))
ASKED: list[float] = []   # when each answer's request reached the model
SEEN: list[tuple[float, str, str]] = []  # (when, method, chat) of each call at the fake Bot API


class Timed(Telegram):
    def _stamp(self, method, p):
        SEEN.append((time.monotonic(), method, str(p.get("chat_id"))))

    def _sendMessage(self, p, req):
        self._stamp("sendMessage", p)
        return super()._sendMessage(p, req)

    def _sendMessageDraft(self, p, req):
        self._stamp("sendMessageDraft", p)
        return super()._sendMessageDraft(p, req)

    def _editMessageText(self, p, req):
        self._stamp("editMessageText", p)
        return super()._editMessageText(p, req)


def brain(req) -> Reply:
    if "write" in req.current_prompt():
        ASKED.append(time.monotonic())
        return Reply.say(ANSWER, chunk_delay_s=WORD_S)
    return Reply.say("Hi.")


def one(svc, chat: int, group: bool) -> dict:
    start = len(SEEN)

    def answers() -> int:
        return sum(1 for m in list(svc.tg.messages) if str(m["chat_id"]) == str(chat) and m["text"] == ANSWER)
    before = answers()
    time.sleep(PACE_S)  # the chat's edit throttle from the answer before has passed, as between two questions
    svc.post(message(chat, OLIVIA, "write it", **({"title": "Team", "mention": True} if group else {})))
    svc.wait(lambda: answers() > before, timeout=120, what="the answer")
    first_word = ASKED[-1] + 2 * WORD_S
    last_word = ASKED[-1] + (WORDS + 2) * WORD_S
    calls = [c for c in SEEN[start:] if c[2] == str(chat)]
    answer_at = next(t for t, m, _c in reversed(calls) if m == "sendMessage")
    shown = next((t for t, m, _c in calls if m in ("sendMessageDraft", "sendMessage")), answer_at)
    return {"shown": shown - first_word, "answer": answer_at - last_word,
            "edits": sum(1 for _t, m, _c in calls if m == "editMessageText")}


def main(n: int) -> None:
    import tests.tg_flow as flow
    flow.Telegram = Timed  # the service's fake Bot API stamps each call
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        env = {"NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_GROUPS_DIR": str(tmp_path / "groups"),
               "TZ": "UTC", "NANOCLAW_MOUNT_ALLOWLIST": str(tmp_path / "allow.json")}

        def make_settings(**more) -> Settings:
            return Settings.load(environ={**env, **{k: str(v) for k, v in more.items()}}, dotenv_path=tmp_path / "x")
        (tmp_path / "data").mkdir()
        url = f"sqlite:///{tmp_path / 'data' / 'nanoclaw.db'}"
        with sandbox_service(make_settings, url, brain, NANOCLAW_PROGRESS_EDIT_S=1) as svc:
            svc.cli("agent", "create", "Andy")
            svc.cli("user", "add", "telegram:111", "--role", "owner")
            for chat, args in ((111, ()), (-100700, ("--kind", "group")), (-100701, ("--kind", "group", "--stream", "off"))):
                svc.cli("wire", "telegram", str(chat), "andy", *args)
            results: dict[str, list[dict]] = {}
            for label, chat, group in (("private chat (draft)", 111, False), ("group (live message)", -100700, True),
                                       ("baseline: --stream off", -100701, True)):
                one(svc, chat, group)  # a warm sandbox first
                results[label] = [one(svc, chat, group) for _ in range(n)]
    print(f"\nstreamed answers: {WORDS} words, one every {WORD_S * 1000:.0f} ms ({WORDS * WORD_S:.1f} s), {n} per row")
    print(f"{'chat':26} {'first word → shown p50':>24} {'last word → answer p50':>24} {'edits':>6}")
    for label, rows in results.items():
        p50 = lambda key: statistics.median(r[key] for r in rows)  # noqa: E731
        print(f"{label:26} {p50('shown') * 1000:>21.0f} ms {p50('answer') * 1000:>21.0f} ms {p50('edits'):>6.0f}")
    base = statistics.median(r["shown"] for r in results["baseline: --stream off"])
    for label in ("private chat (draft)", "group (live message)"):
        mine = statistics.median(r["shown"] for r in results[label])
        print(f"text seen {base / mine:.0f}x sooner than without streaming: {label}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
