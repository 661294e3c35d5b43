"""The `telegram-poll` program: Telegram without a public URL (long polling with getUpdates).

Each update is handed over, signed, to the web program (POST /webhooks/telegram/poll), which
accepts it exactly as a webhook: the same parsing, dedup, routing, clicks and replies. The offset
moves past an update only after the web program answered 2xx, i.e. after it was durably accepted
(or seen before): Telegram keeps every update not confirmed by a later offset, so a crash or a
restart of either program hands the same updates over again and the dedup counts them once.

While the web program does not answer, nothing is confirmed and the poller waits (growing pauses);
an update a running web program refused five times in a row is set aside (inbound/set_aside.py) and
confirmed, so the updates after it are not held up.
A 409 means a webhook is registered (Telegram then refuses getUpdates): the log says so with the
command that removes it. 429 waits `retry_after`; network trouble and 5xx back off; never a spin.
"""
from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass

import requests

from ...channels import handoff
from .adapter import ALLOWED_UPDATES, POLL_KEY_PURPOSE, POLL_PATH
from ...config import install_secret
from ...inbound import set_aside

log = logging.getLogger(__name__)

POLL_TIMEOUT_S = 25          # Telegram holds the request this long when there is nothing new
MAX_BACKOFF_S = 60.0
CONFLICT_WAIT_S = 30.0
FIX_CONFLICT = "flask --app app nanoclaw telegram delete-webhook"


@dataclass
class Answer:
    """What one getUpdates call gave: updates, or how long to wait and why."""
    updates: list[dict]
    wait_s: float = 0.0
    why: str | None = None


# --- pure decisions ---------------------------------------------------------------------------

def backoff(failures: int) -> float:
    """1, 2, 4 … 60 s after consecutive failures."""
    return min(MAX_BACKOFF_S, 2.0 ** max(0, failures - 1))


def read_answer(status: int | None, body, failures: int) -> Answer:
    """A getUpdates response (status None: no answer at all) → updates, or a wait with its reason."""
    if status == 200 and isinstance(body, dict) and body.get("ok") and isinstance(body.get("result"), list):
        return Answer([u for u in body["result"] if isinstance(u, dict) and isinstance(u.get("update_id"), int)])
    params = body.get("parameters") if isinstance(body, dict) else None
    if status == 409:
        return Answer([], CONFLICT_WAIT_S, "a webhook is registered for this bot, so Telegram refuses long "
                                           f"polling: run `{FIX_CONFLICT}` (or set TELEGRAM_MODE=webhook)")
    if status == 429 and isinstance(params, dict) and isinstance(params.get("retry_after"), (int, float)):
        return Answer([], float(params["retry_after"]), "Telegram asks us to slow down (429)")
    if status in (401, 404):
        return Answer([], MAX_BACKOFF_S, "Telegram refused the bot token (check TELEGRAM_BOT_TOKEN)")
    return Answer([], backoff(failures + 1), f"getUpdates failed ({status or 'no answer'})")


def next_offset(offset: int | None, handed: list[int]) -> int | None:
    """The offset that confirms the updates handed over (their ids, in order), if any."""
    return max(handed) + 1 if handed else offset


# --- the program ------------------------------------------------------------------------------

class Poller:
    def __init__(self, settings, *, web_url: str | None = None, poll_timeout: int = POLL_TIMEOUT_S):
        self.settings = settings
        platform = settings.platform
        self.api = f"{platform.get('TELEGRAM_API_BASE', 'https://api.telegram.org')}/bot{platform['TELEGRAM_BOT_TOKEN']}"
        self.web_url = (web_url or f"http://127.0.0.1:{settings.port}") + POLL_PATH
        self.key = handoff.purpose_key(install_secret(settings), POLL_KEY_PURPOSE)
        self.poll_timeout = poll_timeout
        self.offset: int | None = None
        self.failures = 0
        self.stop = threading.Event()
        self._offering: tuple[int, handoff.Offering] | None = None   # the first update not yet done with
        self.http = requests.Session()

    def get_updates(self) -> Answer:
        params = {"timeout": self.poll_timeout, "allowed_updates": json.dumps(list(ALLOWED_UPDATES))}
        if self.offset is not None:
            params["offset"] = self.offset
        try:
            resp = self.http.post(f"{self.api}/getUpdates", data=params, timeout=(5, self.poll_timeout + 10))
        except requests.RequestException as exc:
            log.debug("getUpdates: %s", type(exc).__name__)
            return read_answer(None, None, self.failures)
        try:
            body = resp.json()
        except ValueError:
            body = None
        return read_answer(resp.status_code, body, self.failures)

    def hand_over(self, update: dict) -> tuple[int | None, str]:
        """One try: the web program's status (2xx: stored, or seen before) and the start of its answer."""
        body = json.dumps(update, separators=(",", ":")).encode()
        resp = handoff.post(self.http, self.web_url, self.key, body, f"update {update['update_id']}",
                            "offering it again")
        return handoff.answer_detail(resp)

    def offer(self, update: dict) -> bool:
        """One try at an update: whether it is done with (taken, or set aside after a running web program
        refused it five times in a row, across polls); if not, Telegram keeps it and the next poll brings
        it again."""
        ident = update["update_id"]
        if self._offering is None or self._offering[0] != ident:
            self._offering = (ident, handoff.Offering())
        offering = self._offering[1]
        step = offering.answered(*self.hand_over(update))
        done = step == "done" or (step == "set aside" and set_aside.keep(
            "telegram", str(ident), f"{offering.refusals} times in a row (last: {offering.last})", update))
        if done:
            self._offering = None
        return done

    def run_once(self) -> float:
        """One getUpdates and the hand-over of what it brought; how long to wait before the next."""
        answer = self.get_updates()
        if answer.why:
            self.failures += 1
            log.warning("%s; trying again in %.0f s", answer.why, answer.wait_s)
            return answer.wait_s
        handed = []
        for update in sorted(answer.updates, key=lambda u: u["update_id"]):
            if self.offset is not None and update["update_id"] < self.offset:
                continue
            if not self.offer(update):
                break  # in order: nothing after it is confirmed either
            handed.append(update["update_id"])
        self.offset = next_offset(self.offset, handed)
        if len(handed) < len(answer.updates):
            self.failures += 1
            return backoff(self.failures)
        self.failures = 0
        return 0.0

    def run(self) -> None:
        log.info("long polling Telegram (getUpdates); updates go to %s", self.web_url)
        while not self.stop.is_set():
            wait = self.run_once()
            if wait:
                self.stop.wait(wait)
