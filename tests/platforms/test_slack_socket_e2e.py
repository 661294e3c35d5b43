"""Slack over Socket Mode, the whole service (issue 16): `make run`'s supervisord starts the
`slack-socket` program when SLACK_APP_TOKEN is set; a DM delivered over the fake Socket Mode
connection is answered through a real sandbox with chat.postMessage. Killing the program and the
web program at random moments (10 rounds), with Slack sending unacknowledged envelopes again, loses
no message and answers none twice; the one documented exception, as in the fault test
(tests/lifecycle/test_faults_e2e.py): a reply whose sender was killed mid-send is on record as
interrupted, counted as sent, at most one per kill of the web program."""
from __future__ import annotations

import os
import random
import re
import signal
import time
from collections import Counter

import pytest

from conftest import require
from fakes.model_api import FakeModel
from fakes.slack_api import BOT_USER_ID, TOKEN, FakeSlack
from fakes.slack_socket import APP_TOKEN, FakeSocketMode
from service_harness import SupervisedService
from tests.lifecycle.test_faults_e2e import answer, counted_as_sent, interrupted_replies
from tests.platforms.test_slack_socket import dm

ROUNDS = 10
MARKER = re.compile(r"fault-\d+")


def answers(slack: FakeSlack) -> Counter:
    seen: Counter = Counter()
    for call in slack.calls("chat.postMessage"):
        text = str(call.get("text") or "")
        if text.startswith("ack "):
            seen.update(set(MARKER.findall(text)))
    return seen


def wait_for(predicate, timeout: float, what: str, between=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if between:
            between()
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def service(tmp_path):
    require(__import__("shutil").which("bwrap") is not None, "bubblewrap is not installed")
    with FakeModel(script=answer) as model, FakeSlack() as slack, FakeSocketMode() as socket:
        slack.socket_url = socket.url
        svc = SupervisedService(tmp_path, {
            "NANOCLAW_RUNTIME": "bwrap", "ANTHROPIC_UPSTREAM_URL": model.url,
            "ANTHROPIC_API_KEY": "sk-ant-socket-secret", "SLACK_API_BASE": slack.api, "SLACK_BOT_TOKEN": TOKEN,
            "SLACK_APP_TOKEN": APP_TOKEN, "SLACK_BOT_USER_ID": BOT_USER_ID},
            [["agent", "create", "Andy"], ["user", "add", "slack:U0ALICE01", "--role", "owner"],
             ["wire", "slack", "D0DMALICE", "andy"]])
        try:
            yield svc, slack, socket
        finally:
            svc.stop()


def test_socket_mode_messages_are_answered_once_while_the_program_and_web_are_killed(service):
    svc, slack, socket = service
    assert socket.connected.wait(30), "the slack-socket program did not connect"

    def redeliver():
        try:
            socket.redeliver()
        except RuntimeError:
            pass  # not connected right now: Slack waits for the app to come back

    def send(n: int):
        while True:
            try:
                return socket.send("events_api", dm(f"note fault-{n}", f"17000006{n:02d}.000100"))
            except RuntimeError:
                time.sleep(0.2)

    send(0)
    wait_for(lambda: answers(slack).get("fault-0") == 1, 90, "the first answer")
    rnd = random.Random(17)
    killed, n = [], 0
    for _ in range(ROUNDS):
        for _ in range(rnd.randint(1, 2)):
            n += 1
            send(n)
        time.sleep(rnd.uniform(0.2, 2.0))
        roles = {k: v for k, v in svc.roles().items() if k in ("slack-socket", "web-master", "web-worker")}
        if roles:
            role = rnd.choice(sorted(roles))
            try:
                os.kill(rnd.choice(roles[role]), signal.SIGKILL)
                killed.append(role)
            except ProcessLookupError:
                pass
        redeliver()
    markers = {f"fault-{i}" for i in range(n + 1)}
    wait_for(lambda: markers <= set(answers(slack)) | counted_as_sent(svc), 240, f"answers to all {n + 1} messages",
             between=redeliver)
    assert sorted(m for m, c in answers(slack).items() if c > 1) == [], (Counter(killed), svc.log()[-4000:])
    cut = sorted(markers - set(answers(slack)))  # each on record as interrupted (the wait above)
    replies_cut = [t for t in interrupted_replies(svc) if MARKER.search(t)]
    assert len(replies_cut) <= sum(1 for role in killed if role.startswith("web")), (replies_cut, Counter(killed))
    print(f"killed {dict(Counter(killed))}; {n + 1} messages, each answered once"
          + (f" but {cut}, whose reply was cut off by a kill mid-send (counted as sent)" if cut else ""))
