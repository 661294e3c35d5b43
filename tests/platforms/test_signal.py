"""Signal through signal-cli's JSON-RPC daemon (issue 42): the adapter against the fake daemon (what
Signal would have been asked to do), the events stream read as the daemon writes it, the listener
handing each event to the real web app one at a time, the settings, the CLI's `+number`, and the
agent's egress kept away from the daemon. tests/platforms/test_signal_e2e.py has a sandbox."""
from __future__ import annotations

import dataclasses
import threading

import pytest
from hypothesis import given, settings as hsettings, strategies as st
from werkzeug.serving import make_server

from nanoclaw.channels import choices
from nanoclaw.channels.base import Card, DeliveryError
from nanoclaw.config import Settings, SettingsError
from nanoclaw.models import AcceptedEvent
from nanoclaw.platforms.signal import listener as sl
from nanoclaw.platforms.signal.adapter import SignalAdapter
from nanoclaw.sessions.store import Target
from tests.fakes.signal_cli import FakeSignalCli, data_uri
from tests.platforms.kits import MATRIX_INSTALL_SECRET

ALICE_NO = "+4917600000002"


@pytest.fixture
def daemon():
    with FakeSignalCli() as fake:
        yield fake


@pytest.fixture
def signal_app(make_settings, sqlite_url, daemon):
    from tests.conftest import _build_app
    app = _build_app(make_settings(DATABASE_URL=sqlite_url, SIGNAL_ACCOUNT=daemon.account, SIGNAL_CLI_URL=daemon.url,
                                   NANOCLAW_SECRET_KEY=MATRIX_INSTALL_SECRET))
    yield app
    from nanoclaw.db import database
    database.close()


@pytest.fixture
def talk(signal_app, daemon):
    alice = daemon.person(ALICE_NO, 1)
    return SignalAdapter(signal_app.config["NANOCLAW"]), daemon, alice


# --- out: what Signal is asked to do ---------------------------------------------------------

def test_text_edit_reaction_delete_and_typing(talk):
    adapter, daemon, alice = talk
    dm = Target("signal", alice)
    sent = adapter.send_text(dm, "Friday: dentist at 9.")
    [send] = daemon.calls("send")
    assert send["recipient"] == [alice] and send["message"] == "Friday: dentist at 9." and sent.isdigit()
    adapter.edit_text(dm, sent, "Friday: dentist at 9:30.")
    assert daemon.calls("send")[-1]["editTimestamp"] == int(sent)
    adapter.react(dm, f"{alice}:1700000000123", "👀")  # a person's message: its author and time
    assert daemon.calls("sendReaction")[-1] == {"recipient": [alice], "emoji": "👀", "targetAuthor": alice,
                                                "targetTimestamp": 1700000000123}
    adapter.react(dm, sent, "✅")  # the bot's own: the account is the author
    assert daemon.calls("sendReaction")[-1]["targetAuthor"] == daemon.account
    adapter.delete_message(dm, sent)
    assert daemon.calls("remoteDelete")[-1]["targetTimestamp"] == int(sent)
    adapter.typing(dm)
    assert daemon.calls("sendTyping")[-1] == {"recipient": [alice]}
    group = Target("signal", "group.Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI=")
    adapter.send_text(group, "hello all")
    assert daemon.calls("send")[-1]["groupId"] == "Pmpi+EfPWmsxiomLe9Nx2XF9HOE483p6iKiFj65iMwI="


def test_long_text_is_split_and_an_unregistered_number_is_a_permanent_failure(talk):
    adapter, daemon, _alice = talk
    text = "word " * 900  # 4,500 characters: three messages
    adapter.send_text(Target("signal", daemon.person(None, 2)), text)
    parts = [c["message"] for c in daemon.calls("send")]
    assert len(parts) == 3 and all(len(p) <= 2000 for p in parts) and " ".join(parts).split() == text.split()
    with pytest.raises(DeliveryError) as refused:
        adapter.send_text(Target("signal", "00000000-0000-4000-8000-00000000dead"), "hi")
    assert refused.value.permanent and "UNREGISTERED" in str(refused.value)


def test_a_send_signal_could_not_make_now_is_tried_again_and_only_a_lasting_one_is_given_up(talk):
    """Issue 61, item 1, against signal-cli's own answer: a send that reached no recipient is JSON-RPC error
    -1 "Failed to send message" with the results in error.data.response. A network failure is tried again
    (delivery keeps the row), a rate limit after Signal's retryAfterSeconds, an unregistered user never."""
    adapter, daemon, alice = talk
    dm = Target("signal", alice)
    daemon.unreachable.add(alice)
    with pytest.raises(DeliveryError) as away:
        adapter.send_text(dm, "are you there?")
    assert not away.value.permanent and "NETWORK_FAILURE" in str(away.value) and away.value.retry_after is None
    daemon.unreachable.clear()
    daemon.rate_limited[alice] = 1234
    with pytest.raises(DeliveryError) as slow:
        adapter.send_text(dm, "are you there?")
    assert not slow.value.permanent and slow.value.retry_after == 1234
    del daemon.rate_limited[alice]
    assert adapter.send_text(dm, "are you there?").isdigit()  # the same row, delivered once Signal takes it
    answers = [r.json for r in daemon.accepted(lambda r: r.path == "/api/v1/rpc")
               if isinstance(r.json, dict) and r.json.get("method") == "send"]
    assert len(answers) == 3


def test_what_a_failed_send_means():
    from nanoclaw.platforms.signal.rpc import failure
    def error(*kinds, code=-1, **extra):
        results = [{"recipientAddress": {"uuid": f"u{i}"}, "type": k, **extra} for i, k in enumerate(kinds)]
        return {"code": code, "message": "Failed to send message", "data": {"response": {"timestamp": 1,
                                                                                         "results": results}}}
    assert failure("send", error("UNREGISTERED_FAILURE")).permanent
    assert failure("send", error("UNREGISTERED_FAILURE", "IDENTITY_FAILURE")).permanent
    assert not failure("send", error("UNREGISTERED_FAILURE", "NETWORK_FAILURE")).permanent  # one may still get it
    assert failure("send", error("RATE_LIMIT_FAILURE", code=-5, retryAfterSeconds=90)).retry_after == 90
    assert failure("send", error("PROOF_REQUIRED_FAILURE", token="t")).retry_after == 60  # no wait given
    assert failure("send", {"code": -1, "message": "No recipients given", "data": None}).permanent
    assert failure("send", {"code": -5, "message": "Rate limit"}).retry_after == 60
    assert not failure("send", {"code": -3, "message": "IO"}).permanent


def test_files_go_as_data_uris_and_come_back_over_the_api(talk, tmp_path):
    adapter, daemon, alice = talk
    chart = tmp_path / "chart.png"
    chart.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(300))
    adapter.send_file(Target("signal", alice), chart, "the chart")
    [send] = daemon.calls("send")
    [uri] = send["attachments"]
    assert data_uri(uri) == ("image/png", "chart.png", chart.read_bytes()) and send["message"] == "the chart"
    kept = daemon.attachment(b"%PDF-1.7 lease", "application/pdf", "lease.pdf")
    name, data = adapter.fetch_attachment({"signal_id": kept["id"], "name": "lease.pdf", "size": 14,
                                           "chat": alice, "sender": alice})
    assert (name, data) == ("lease.pdf", b"%PDF-1.7 lease")
    assert daemon.calls("getAttachment")[-1] == {"id": kept["id"], "recipient": alice}


def test_a_voice_note_is_marked_as_one_where_signal_cli_can(talk, tmp_path):
    adapter, daemon, alice = talk
    voice = tmp_path / "answer.ogg"
    voice.write_bytes(b"OggS" + bytes(100))
    adapter.send_file(Target("signal", alice), voice, "It is sunny.", voice=True)
    assert daemon.calls("send")[-1]["voiceNote"] is True
    old = FakeSignalCli(version="0.13.4").start()
    try:
        settings = dataclasses.replace(adapter.settings, platform={**adapter.settings.platform, "SIGNAL_CLI_URL": old.url})
        old.person(ALICE_NO, 1)
        SignalAdapter(settings).send_file(Target("signal", alice), voice, "It is sunny.", voice=True)
        assert "voiceNote" not in old.calls("send")[-1]  # an audio file then
    finally:
        old.stop()


def test_a_card_is_numbered_and_a_quoted_number_or_a_keycap_chooses(talk, signal_app):
    adapter, daemon, alice = talk
    card = Card("Bo wants to talk to Andy", "Hi, I'm Bo.", (("Allow", "nsa-7:allow"), ("Deny", "nsa-7:deny")))
    card_id = adapter.send_card(Target("signal", alice), card)
    shown = daemon.calls("send")[-1]["message"]
    assert "1. Allow" in shown and "2. Deny" in shown and "2️⃣" in shown
    with signal_app.app_context():
        reply = daemon.envelope(alice, number=ALICE_NO, name="Olivia", dataMessage={
            "timestamp": daemon.stamp(), "message": "2", "quote": {"id": int(card_id), "authorUuid": daemon.account_uuid,
                                                                   "authorNumber": daemon.account, "text": shown}})
        [action] = adapter.parse({**reply, "account_uuid": daemon.account_uuid}).actions
        assert (action.action_id, action.user_id, action.message_id) == ("nsa-7:deny", f"signal:{alice}", card_id)
        keycap = daemon.envelope(alice, dataMessage={"timestamp": daemon.stamp(), "reaction": {
            "emoji": "1️⃣", "targetAuthorUuid": daemon.account_uuid, "targetSentTimestamp": int(card_id),
            "isRemove": False}})
        [action] = adapter.parse(keycap).actions
        assert action.action_id == "nsa-7:allow"
        elsewhere = daemon.envelope(alice, dataMessage={"timestamp": daemon.stamp(), "message": "1",
                                                        "quote": {"id": 1234, "authorUuid": alice}})
        parsed = adapter.parse(elsewhere)
        assert parsed.actions == [] and parsed.events[0].text == "1"  # a number under something else is a message
    assert choices.number_in("2️⃣") == 2


# --- in: the events stream -----------------------------------------------------------------------

def test_server_sent_events_are_read_as_the_daemon_writes_them():
    stream = [b":", b"event:receive", b'data:{"a":1}', b"", b"", b"event:receive", b"data: {\"b\"", b'data:2}', b"",
              b":\r", b"data:orphan", b""]
    assert list(sl.events(stream)) == [("receive", '{"a":1}'), ("receive", '{"b"\n2}'), ("message", "orphan")]
    pieces = iter([b"event:rec", b"eive\ndata:{}\n", b"\n:\n", b""])
    assert list(sl.lines_of(lambda _n: next(pieces))) == [b"event:receive", b"data:{}", b"", b":"]


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=20))
def test_any_bytes_on_the_stream_give_events_or_nothing_never_an_error(chunks):
    pieces = iter(chunks + [b""])
    for kind, data in sl.events(sl.lines_of(lambda _n: next(pieces))):
        assert isinstance(kind, str) and isinstance(data, str)


class Web:
    """The web app served on 127.0.0.1."""

    def __init__(self, app):
        self.server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def stop(self):
        self.server.shutdown()


def accepted_ids() -> list[str]:
    return [e.event_id for e in AcceptedEvent.select().where(AcceptedEvent.channel == "signal")
            .order_by(AcceptedEvent.id)]


def test_the_listener_hands_each_event_over_once_and_in_order(signal_app, daemon):
    from tests.platforms.test_contract import HeldIntake
    signal_app.extensions["nanoclaw.intake"] = HeldIntake()
    alice = daemon.person(ALICE_NO, 1)
    sent = [daemon.message(alice, f"m{n}", number=ALICE_NO, name="Alice") for n in range(3)]
    daemon.push({"envelope": {"sourceUuid": alice, "timestamp": 5, "typingMessage": {"action": "STARTED"}},
                 "account": daemon.account})
    web = Web(signal_app)
    listener = sl.EventsListener(signal_app.config["NANOCLAW"], web_url=web.url)
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    try:
        wanted = [f"{alice}:{e['envelope']['timestamp']}" for e in sent]
        deadline = threading.Event()
        for _ in range(200):
            if accepted_ids() == wanted and listener.handed == 4:
                break
            deadline.wait(0.05)
        assert accepted_ids() == wanted and listener.handed == 4  # the typing event went over and was not routed
    finally:
        listener.halt()
        thread.join(5)
        assert not thread.is_alive()
        web.stop()


def test_while_the_web_program_refuses_the_same_event_is_offered_again_and_nothing_after_it(signal_app, daemon):
    from tests.platforms.test_contract import HeldIntake
    signal_app.extensions["nanoclaw.intake"] = HeldIntake()
    alice = daemon.person(ALICE_NO, 1)
    first, second = daemon.message(alice, "first", number=ALICE_NO), daemon.message(alice, "second", number=ALICE_NO)
    refused = {"n": 0}

    class Refusing:
        """The web program answering 503 three times."""
        def __init__(self, app):
            self.app = app

        def __call__(self, environ, start_response):
            if refused["n"] < 3:
                refused["n"] += 1
                start_response("503 Service Unavailable", [("Content-Length", "0")])
                return [b""]
            return self.app(environ, start_response)
    web = Web(Refusing(signal_app))
    listener = sl.EventsListener(signal_app.config["NANOCLAW"], web_url=web.url)
    listener.deliver = _fast(listener.deliver)
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    try:
        wait = threading.Event()
        for _ in range(300):
            if len(accepted_ids()) == 2:
                break
            wait.wait(0.05)
        assert accepted_ids() == [f"{alice}:{first['envelope']['timestamp']}",
                                  f"{alice}:{second['envelope']['timestamp']}"] and refused["n"] == 3
    finally:
        listener.halt()
        thread.join(5)
        assert not thread.is_alive()
        web.stop()


def test_a_stop_while_an_event_is_handed_over_ends_the_listener_when_the_hand_over_ends(signal_app, daemon):
    """The stop comes while the web program still holds the event: once it answers, the listener must
    not go back to waiting on a quiet stream (a minute, until the read times out)."""
    from tests.platforms.test_contract import HeldIntake
    signal_app.extensions["nanoclaw.intake"] = HeldIntake()
    alice = daemon.person(ALICE_NO, 1)
    daemon.message(alice, "only", number=ALICE_NO)
    arrived, answer = threading.Event(), threading.Event()

    class Holding:
        """The web program holding the one event until the listener was told to stop."""
        def __init__(self, app):
            self.app = app

        def __call__(self, environ, start_response):
            arrived.set()
            answer.wait(10)
            return self.app(environ, start_response)
    web = Web(Holding(signal_app))
    listener = sl.EventsListener(signal_app.config["NANOCLAW"], web_url=web.url)
    thread = threading.Thread(target=listener.run, daemon=True)
    thread.start()
    try:
        assert arrived.wait(10)
        listener.halt()
        answer.set()
        thread.join(5)
        assert not thread.is_alive() and len(accepted_ids()) == 1
    finally:
        answer.set()
        listener.halt()
        web.stop()


def _fast(deliver):
    """The listener's own deliver, with its pauses at 10 ms (the backoff is tested on its own)."""
    def run(data):
        saved = sl.backoff
        sl.backoff = lambda failures: 0.01
        try:
            deliver(data)
        finally:
            sl.backoff = saved
    return run


def test_backoff_grows_to_a_minute():
    assert [sl.backoff(n) for n in (1, 2, 3, 10)] == [1, 2, 4, 60]


# --- settings, CLI, egress ---------------------------------------------------------------------

def test_the_daemon_url_may_not_be_the_web_programs(tmp_path):
    def load(**env):
        return Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC", **env},
                             dotenv_path=tmp_path / "none.env")
    assert load(SIGNAL_ACCOUNT="+4915100000001").platform["SIGNAL_CLI_URL"] == "http://127.0.0.1:8686"
    with pytest.raises(SettingsError, match="web program's own address"):
        load(SIGNAL_ACCOUNT="+4915100000001", SIGNAL_CLI_URL="http://127.0.0.1:8080")
    with pytest.raises(SettingsError, match="web program's own address"):
        load(SIGNAL_ACCOUNT="+4915100000001", SIGNAL_CLI_URL="http://localhost:9000", NANOCLAW_PORT="9000")
    with pytest.raises(SettingsError, match="international form"):
        load(SIGNAL_ACCOUNT="015100000001")


def test_user_add_and_wire_take_a_number_and_keep_the_uuid(signal_app, daemon):
    alice = daemon.person(ALICE_NO, 1)
    runner = signal_app.test_cli_runner()
    assert runner.invoke(args=["nanoclaw", "agent", "create", "Andy"]).exit_code == 0
    added = runner.invoke(args=["nanoclaw", "user", "add", f"signal:{ALICE_NO}", "--role", "owner"])
    assert added.exit_code == 0 and f"{ALICE_NO} is signal:{alice}" in added.output
    assert f"added user signal:{alice}" in added.output
    wired = runner.invoke(args=["nanoclaw", "wire", "signal", ALICE_NO, "andy"])
    assert wired.exit_code == 0 and alice in wired.output
    stranger = runner.invoke(args=["nanoclaw", "user", "add", "signal:+4900000000000"])
    assert stranger.exit_code == 2 and "is not on Signal" in stranger.output and "Traceback" not in stranger.output


def test_no_allowlist_entry_opens_the_daemon_or_the_web_program_to_an_agent(signal_app):
    from nanoclaw.proxy.egress import EgressPolicy, decide
    from nanoclaw.proxy.server import own_ports
    settings = signal_app.config["NANOCLAW"]
    ports = own_ports(dataclasses.replace(settings, platform={**settings.platform,
                                                               "SIGNAL_CLI_URL": "http://127.0.0.1:8686"}))
    assert ports >= {8686, settings.port}
    from nanoclaw.proposal_rules import check_host_entry
    policy = EgressPolicy(tuple(check_host_entry(e) for e in ("127.0.0.1:8686", f"127.0.0.1:{settings.port}",
                                                              "127.0.0.1:5000")))
    for port in (8686, settings.port):
        verdict = decide(policy, "andy", "127.0.0.1", port, ["127.0.0.1"], frozenset(ports))
        assert not verdict.allowed and "this host's own services" in verdict.reason
    assert decide(policy, "andy", "127.0.0.1", 5000, ["127.0.0.1"], frozenset(ports)).allowed


def test_what_a_sender_hides_is_never_guessed(talk):
    adapter, daemon, _alice = talk
    hidden = daemon.person(None, 3)
    event = daemon.envelope(hidden, dataMessage={"timestamp": 17, "message": "hi"})
    [built] = adapter.parse(event).events
    assert (built.sender_id, built.sender_name, built.chat_id) == (hidden, f"Signal user {hidden[:8]}", hidden)


def test_doctor_checks_the_daemon_its_version_and_the_account(daemon):
    from nanoclaw.platforms.signal.doctor import check
    values = {"SIGNAL_ACCOUNT": daemon.account, "SIGNAL_CLI_URL": daemon.url}
    good = check(values)
    assert good.ok and f"{daemon.account} on signal-cli 0.14.6" in good.line()
    assert check({**values, "SIGNAL_ACCOUNT": "+4900000000009"}).ok is False
    old = FakeSignalCli(version="0.11.2").start()
    try:
        stale = check({**values, "SIGNAL_CLI_URL": old.url})
        assert stale.ok is False and "too old" in stale.detail and "0.11.5" in stale.detail
    finally:
        old.stop()
    from tests.platforms.test_contract import closed_port
    down = check({**values, "SIGNAL_CLI_URL": closed_port()})
    assert down.ok is False and "signal daemon" in down.detail
    assert check({}) is None  # not set up: nothing to say


def test_supervisord_runs_one_signal_program_which_owns_signal_cli_where_it_is_installed(make_settings, tmp_path,
                                                                                      monkeypatch):
    from nanoclaw.platforms.signal import runs_daemon
    from nanoclaw.supervise import listener_programs
    import shutil as shutil_mod
    settings = make_settings(SIGNAL_ACCOUNT="+4915100000001")
    monkeypatch.setattr(shutil_mod, "which", lambda name: "/usr/local/bin/signal-cli" if name == "signal-cli" else None)
    conf = listener_programs(settings, tmp_path, tmp_path / "bin")
    assert "nanoclaw signal listen" in conf.split("[program:signal-events]")[1]
    assert "[program:signal-cli]" not in conf  # the listener runs it: two processes would fight over the account
    assert runs_daemon(settings.platform)
    remote = make_settings(SIGNAL_ACCOUNT="+4915100000001", SIGNAL_CLI_URL="http://10.0.0.5:8686")
    assert "[program:signal-events]" in listener_programs(remote, tmp_path, tmp_path)
    assert not runs_daemon(remote.platform)  # read its events stream there
    monkeypatch.setattr(shutil_mod, "which", lambda name: None)
    assert not runs_daemon(settings.platform)


def fake_signal_cli(folder, script: str):
    """A `signal-cli` on PATH that does what the test says (the real one needs Java and an account)."""
    folder.mkdir(exist_ok=True)
    exe = folder / "signal-cli"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    return folder


def test_link_shows_a_qr_code_and_waits_for_the_phone(signal_app, tmp_path, monkeypatch):
    import os
    bin_dir = fake_signal_cli(tmp_path / "bin", 'echo "sgnl://linkdevice?uuid=AbC123&pub_key=XyZ%2B9"\n'
                                                'echo "Associated with: +4915100000001"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    done = signal_app.test_cli_runner().invoke(args=["nanoclaw", "signal", "link", "--name", "Kitchen"])
    assert done.exit_code == 0, done.output
    assert "sgnl://linkdevice?uuid=AbC123&pub_key=XyZ%2B9" in done.output and "█" in done.output
    assert "speaks as you" in done.output and "Associated with: +4915100000001" in done.output
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    missing = signal_app.test_cli_runner().invoke(args=["nanoclaw", "signal", "link"])
    assert missing.exit_code == 2 and "signal-cli is not installed" in missing.output


def test_daemon_runs_signal_cli_on_the_urls_port_for_the_account(tmp_path):
    import os
    import subprocess
    import sys
    seen = tmp_path / "argv"
    bin_dir = fake_signal_cli(tmp_path / "bin", f'echo "$@" > {seen}\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NANOCLAW_DATA_DIR": str(tmp_path / "data"),
           "SIGNAL_ACCOUNT": "+4915100000001", "SIGNAL_CLI_URL": "http://127.0.0.1:8699",
           "NANOCLAW_ENV_FILE": str(tmp_path / "none.env")}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([f"{os.path.dirname(sys.executable)}/flask", "--app", "app", "nanoclaw", "signal", "daemon"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert seen.read_text().split() == ["-a", "+4915100000001", "daemon", "--http", "127.0.0.1:8699",
                                        "--receive-mode", "on-connection", "--no-receive-stdout"]
