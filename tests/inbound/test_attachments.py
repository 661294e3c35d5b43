"""Files users send land in the session's inbox/, where the agent reads them.

For each platform a verified webhook (a Gateway payload for Discord) carrying a file for a wired
chat is routed against a local fake of the platform that serves the file as the platform does;
the exact bytes must appear in `<session>/inbox/<event>/<name>` and messages_in.content.attachments
must name the sandbox path. A file over NANOCLAW_ATTACHMENT_MAX_BYTES, one that cannot be
downloaded, a hostile name, and a payload URL on a foreign host (which must never see the token)
are each tried. The last test runs the real sandbox: the agent's Read tool gets the file's text.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nanoclaw.sessions.wake import NO_WAKE
from nanoclaw.app import create_app
from nanoclaw.channels.download import AttachmentError, AttachmentTooLarge, fetch, host_allowed
from nanoclaw.platforms.slack.adapter import SlackAdapter
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.models import Session
from nanoclaw.inbound.router import route
from nanoclaw.sessions import session_schema as schema
from nanoclaw.inbound.inbox import describe, safe_dir, safe_name, unique_name
from tests.fakes import discord_api, slack_api, whatsapp_api
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.platform_server import FakePlatform
from tests.fakes.slack_api import FakeSlack
from tests.fakes.whatsapp_api import FakeWhatsApp
from tests.tg_flow import message, person, post as tg_post, sandbox_service, telegram_app, texts
from tests.tg_flow import tg  # noqa: F401  (fixture)

from agent_runner.attachments import attachment_line, human_size  # noqa: E402  (the runner's package)
from agent_runner.poll_loop import to_message  # noqa: E402
from agent_runner.selection import InboundRow  # noqa: E402

FIXTURES = Path(__file__).parent.parent / "fixtures"
ALICE = 111222333          # the sender of the Telegram fixtures
NOTES = b"Decisions: ship on Friday.\nOwner: Alice.\nBudget: 1200 EUR, approved.\n"


def fixture(platform: str, name: str) -> dict:
    return json.loads((FIXTURES / platform / f"{name}.json").read_text())


class Foreign(FakePlatform):
    """Somebody else's server, named in a payload: it must never be asked for anything."""
    name = "foreign"

    def answer(self, req):
        return 200, b"stolen", {"content-type": "application/octet-stream"}


@pytest.fixture
def foreign():
    with Foreign() as server:
        yield server


def session_rows(settings) -> list[tuple[Path, dict]]:
    """(session folder, messages_in content) of every routed message, oldest first."""
    out = []
    for session in Session.select().order_by(Session.created_at):
        path = settings.sessions_dir / session.agent_group.folder / session.id
        conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
        try:
            out += [(path, json.loads(r["content"]))
                    for r in conn.execute("SELECT content FROM messages_in ORDER BY seq")]
        finally:
            conn.close()
    return out


def host_path(session: Path, entry: dict) -> Path:
    """Where the agent's /workspace/inbound/… path is on the host (the session's host part)."""
    prefix = "/workspace/inbound/"
    assert entry["path"].startswith(prefix + "inbox/"), entry
    return session / "host" / entry["path"][len(prefix):]


def inbox_files(session: Path) -> list[str]:
    """Every entry under inbox/, relative (hidden temporary files included)."""
    root = session / "host" / "inbox"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# --- pure: names, sizes, hosts, the runner's line ------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("invoice.pdf", "invoice.pdf"), ("../../etc/passwd", "passwd"), ("..\\..\\boot.ini", "boot.ini"),
    (".bashrc", "bashrc"), ("...", "attachment"), ("", "attachment"), (None, "attachment"), ("-rf", "rf"),
    ("evil\u202egpj.exe", "evilgpj.exe"), ("a\x00b\nc.txt", "abc.txt"), ("photo.jpg ", "photo.jpg"),
])
def test_safe_name(raw, expected):
    assert safe_name(raw) == expected


def test_long_names_keep_their_extension_and_fit():
    name = safe_name("x" * 300 + ".tar.gz")
    assert name.endswith(".gz") and len(name.encode()) <= 120
    wide = safe_name("€" * 200 + ".pdf")
    assert wide.endswith(".pdf") and len(wide.encode()) <= 120 and wide.encode().decode() == wide


def test_colliding_names_get_a_suffix():
    taken: set[str] = set()
    assert [unique_name(n, taken) for n in ("a.jpg", "A.JPG", "a.jpg", "notes", "notes")] == \
        ["a.jpg", "A-2.JPG", "a-3.jpg", "notes", "notes-2"]


def test_message_folders_are_plain_names():
    assert safe_dir("C0GENERAL:1700000080.001000") == "C0GENERAL_1700000080.001000"
    assert "/" not in safe_dir("../../x") and not safe_dir("..").startswith(".")
    long = safe_dir("w" * 300)
    assert len(long) <= 80 and long != safe_dir("w" * 299)


def test_every_platforms_metadata_is_described_alike():
    assert describe({"kind": "document", "file_id": "B", "name": "a.pdf", "mime": "application/pdf", "size": 5}) == \
        {"name": "a.pdf", "mime": "application/pdf", "size": 5, "kind": "document"}
    assert describe({"type": "image", "media_id": "1", "mime_type": "image/jpeg"}) == \
        {"mime": "image/jpeg", "kind": "image"}
    assert describe({"id": "1", "filename": "m.md", "content_type": "text/markdown; charset=utf-8", "size": 58,
                     "url": "https://cdn.discordapp.com/x"}) == {"name": "m.md", "mime": "text/markdown", "size": 58}


def test_human_sizes():
    assert [human_size(n) for n in (12, 52 * 1024, 1536 * 1024, 31 * 2**20, 20 * 2**20)] == \
        ["12 bytes", "52 KB", "1.5 MB", "31 MB", "20 MB"]


def test_the_token_goes_only_to_the_platforms_hosts_or_the_configured_base():
    hosts = ("files.slack.com",)
    assert host_allowed("https://files.slack.com/files-pri/T-F/download/a.txt", hosts)
    assert host_allowed("https://FILES.slack.com/x", hosts)
    assert host_allowed("http://127.0.0.1:8001/files-pri/x", hosts, ["http://127.0.0.1:8001/api"])
    for url in ("http://files.slack.com/x", "https://files.slack.com:8443/x", "https://files.slack.com.evil.io/x",
                "https://evil.io/files.slack.com/x", "https://user@evil.io/x", "http://127.0.0.1:8002/x",
                "file:///etc/passwd", "", None, "https://[::1/x"):
        assert not host_allowed(url, hosts, ["http://127.0.0.1:8001/api"]), url


def row(content: dict) -> InboundRow:
    return InboundRow(id="m1", seq=1, kind="chat", timestamp="2025-01-01T10:00:00.000Z", trigger=True, tries=0,
                      content=content)


def test_the_agent_reads_where_the_file_is_and_why_one_is_missing():
    saved = {"kind": "photo", "name": "photo.jpg", "mime": "image/jpeg", "size": 53248,
             "path": "/workspace/inbound/inbox/900000013/photo.jpg"}
    failed = {"name": "video.mp4", "mime": "video/mp4", "size": 32505856, "error": "too large (31 MB > 20 MB)"}
    text = to_message(row({"text": "look", "sender": "Alice", "attachments": [saved, failed]})).content
    assert text == ("look\n[attachment: /workspace/inbound/inbox/900000013/photo.jpg (image/jpeg, 52 KB)]\n"
                    "[attachment not saved: video.mp4 (video/mp4, 31 MB): too large (31 MB > 20 MB)]")
    assert attachment_line({"name": "old.pdf"}) == "[attachment: old.pdf]"  # metadata only, as before
    assert attachment_line({}) is None


# --- Telegram -----------------------------------------------------------------------------------------

def tg_document(name: str = "invoice.pdf", size: int | None = 48213, file_id: str = "BQACAgIAAxkBAAIBZ2V") -> dict:
    update = fixture("telegram", "document_message")
    update["update_id"] = int(time.time() * 1000) % 10**9
    doc = update["message"]["document"]
    doc.update(file_name=name, file_id=file_id)
    if size is None:
        del doc["file_size"]
    else:
        doc["file_size"] = size
    return update


def wired_telegram(make_settings, sqlite_url, tg, **env):
    return telegram_app(make_settings, sqlite_url, tg, ("agent", "create", "Andy"),
                        ("user", "add", f"telegram:{ALICE}", "--role", "owner"),
                        ("wire", "telegram", str(ALICE), "andy"), **env)


def test_telegram_document_lands_in_the_inbox(make_settings, sqlite_url, tg):
    data = b"%PDF-1.4\n" + os.urandom(3000)
    tg.add_file(data, file_id="BQACAgIAAxkBAAIBZ2V", file_path="documents/file_7.pdf")
    with wired_telegram(make_settings, sqlite_url, tg) as app:
        update = tg_document(size=len(data))
        tg_post(app, update)
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    [entry] = content["attachments"]
    assert entry == {"kind": "document", "name": "invoice.pdf", "mime": "application/pdf", "size": len(data),
                     "path": f"/workspace/inbound/inbox/{update['update_id']}/invoice.pdf"}
    saved = host_path(session, entry)
    assert saved.read_bytes() == data and content["text"] == "please file this"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o644 and stat.S_IMODE(saved.parent.stat().st_mode) == 0o755
    assert inbox_files(session) == [f"{update['update_id']}/invoice.pdf"]  # no temporary file left
    assert tg.calls("getFile") == [{"file_id": "BQACAgIAAxkBAAIBZ2V"}]


def test_telegram_photo_is_named_after_its_file_path(make_settings, sqlite_url, tg):
    jpeg = b"\xff\xd8\xff\xe0" + os.urandom(500)
    tg.add_file(jpeg, file_id="AgACAgIAAxk-large", file_path="photos/file_3.jpg")
    with wired_telegram(make_settings, sqlite_url, tg) as app:
        tg_post(app, fixture("telegram", "photo_message"))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    [entry] = content["attachments"]
    assert (entry["name"], entry["mime"], entry["kind"]) == ("file_3.jpg", "image/jpeg", "photo")
    assert host_path(session, entry).read_bytes() == jpeg


def test_over_the_cap_the_message_is_kept_and_the_file_is_not_asked_for(make_settings, sqlite_url, tg):
    tg.add_file(b"x" * 5000, file_id="BQACAgIAAxkBAAIBZ2V")
    with wired_telegram(make_settings, sqlite_url, tg, NANOCLAW_ATTACHMENT_MAX_BYTES=2048) as app:
        tg_post(app, tg_document(size=5000))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    assert content["text"] == "please file this" and app.woken == ["andy"]
    assert content["attachments"] == [{"kind": "document", "name": "invoice.pdf", "mime": "application/pdf",
                                       "size": 5000, "error": "too large (5 KB > 2 KB)"}]
    assert tg.calls("getFile") == [] and inbox_files(session) == []


def test_a_file_bigger_than_telegram_said_is_refused_by_its_length(make_settings, sqlite_url, tg):
    tg.add_file(os.urandom(300_000), file_id="BQACAgIAAxkBAAIBZ2V", file_path="documents/file_1.bin")
    with wired_telegram(make_settings, sqlite_url, tg, NANOCLAW_ATTACHMENT_MAX_BYTES=100_000) as app:
        tg.fail_next(200, {"ok": True, "result": {"file_id": "BQACAgIAAxkBAAIBZ2V", "file_unique_id": "AgAD",
                                                  "file_path": "documents/file_1.bin"}},
                     match=lambda r: r.path.endswith("/getFile"))  # no file_size anywhere
        tg_post(app, tg_document(size=None))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    assert content["attachments"][0]["error"] == "too large (293 KB > 98 KB)"
    assert inbox_files(session) == []


class Endless(BaseHTTPRequestHandler):
    """Streams without a Content-Length, forever (until the client hangs up)."""
    protocol_version = "HTTP/1.0"
    got: list[str] = []

    def log_message(self, *_args):
        pass

    def do_GET(self):
        Endless.got.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"z" * 65536)
        except OSError:
            pass


def test_an_endless_answer_is_cut_off_at_the_cap():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(AttachmentTooLarge) as caught:
            fetch(f"http://127.0.0.1:{server.server_address[1]}/f", max_bytes=1_000_000)
        assert caught.value.size is None and caught.value.cap == 1_000_000
        assert time.monotonic() - started < 10 and Endless.got == ["/f"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_file_telegram_will_not_hand_out_is_reported(make_settings, sqlite_url, tg):
    with wired_telegram(make_settings, sqlite_url, tg) as app:
        tg_post(app, tg_document(file_id="BQACunknown"))
        [(_session, content)] = session_rows(app.config["NANOCLAW"])
    [entry] = content["attachments"]
    assert entry["error"].startswith("could not be downloaded: Telegram would not hand it out")
    assert "invalid file_id" in entry["error"] and tg.token not in entry["error"]
    assert "[attachment not saved: invoice.pdf" in to_message(row(content)).content


@pytest.mark.parametrize("hostile, saved_as", [
    ("../../etc/passwd", "passwd"), (".bashrc", "bashrc"), ("/tmp/../../x.sh", "x.sh"),
    ("a" * 400 + ".txt", "a" * 116 + ".txt"),
])
def test_hostile_names_stay_inside_the_inbox(make_settings, sqlite_url, tg, hostile, saved_as):
    tg.add_file(b"payload", file_id="BQACAgIAAxkBAAIBZ2V")
    with wired_telegram(make_settings, sqlite_url, tg) as app:
        update = tg_document(name=hostile, size=7)
        tg_post(app, update)
        [(session, content)] = session_rows(app.config["NANOCLAW"])
        data_dir = app.config["NANOCLAW"].data_dir
    assert content["attachments"][0]["name"] == saved_as
    assert inbox_files(session) == [f"{update['update_id']}/{saved_as}"]
    holding = [p for p in data_dir.parent.rglob("*") if p.is_file() and p.read_bytes() == b"payload"]
    assert holding == [session / "host" / "inbox" / str(update["update_id"]) / saved_as]  # and nowhere else


def test_one_download_for_every_agent_the_message_goes_to(make_settings, sqlite_url, tg):
    data = os.urandom(4000)
    tg.add_file(data, file_id="BQACAgIAAxkBAAIBZ2V")
    with telegram_app(make_settings, sqlite_url, tg, ("agent", "create", "Andy"), ("agent", "create", "Bea"),
                      ("user", "add", f"telegram:{ALICE}", "--role", "owner"),
                      ("wire", "telegram", str(ALICE), "andy"), ("wire", "telegram", str(ALICE), "bea")) as app:
        tg_post(app, tg_document(size=len(data)))
        rows = session_rows(app.config["NANOCLAW"])
    assert len(rows) == 2 and {session.parent.name for session, _ in rows} == {"andy", "bea"}
    for session, content in rows:
        assert host_path(session, content["attachments"][0]).read_bytes() == data
    assert len(tg.calls("getFile")) == 1
    assert len([r for r in tg.requests if r.path.startswith("/file/")]) == 1


# --- Slack ------------------------------------------------------------------------------------------

def slack_app(make_settings, sqlite_url, fake, **env):
    app = create_app(make_settings(DATABASE_URL=sqlite_url, SLACK_BOT_TOKEN=slack_api.TOKEN,
                                   SLACK_SIGNING_SECRET=slack_api.SIGNING_SECRET, SLACK_API_BASE=fake.api, **env))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    for args in (("agent", "create", "Andy"), ("user", "add", "slack:U0ALICE01", "--role", "owner"),
                 ("wire", "slack", "D0DMALICE", "andy")):
        assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
    return app


def slack_post(app, payload: dict):
    body = json.dumps(payload).encode()
    ts = str(int(time.time()))
    sig = hmac.new(slack_api.SIGNING_SECRET.encode(), f"v0:{ts}:".encode() + body, hashlib.sha256).hexdigest()
    resp = app.test_client().post("/webhooks/slack/events", data=body, headers={
        "Content-Type": "application/json", "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={sig}"})
    assert resp.status_code == 200, resp.data


@pytest.fixture
def slack():
    with FakeSlack() as fake:
        yield fake


def slack_share(fake, host: str) -> dict:
    """The file_share fixture with its files.slack.com URLs moved to `host`."""
    text = json.dumps(fixture("slack", "file_share_download")).replace("https://files.slack.com", host)
    return json.loads(text)


def test_slack_file_is_fetched_with_the_bot_token(make_settings, sqlite_url, slack):
    slack.add_file("call notes.txt", NOTES, "text/plain", file_id="F0NOTES001")
    app = slack_app(make_settings, sqlite_url, slack)
    try:
        slack_post(app, slack_share(slack, slack.url))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    [entry] = content["attachments"]
    assert entry["path"] == "/workspace/inbound/inbox/D0DMALICE_1700000090.002000/call notes.txt"
    assert host_path(session, entry).read_bytes() == NOTES and entry["size"] == len(NOTES)
    [download] = [r for r in slack.requests if r.path.startswith("/files-pri/")]
    assert download.path.endswith("/download/call_notes.txt") and download.status == 200
    assert download.headers["authorization"] == f"Bearer {slack_api.TOKEN}"


def test_slack_file_on_a_foreign_host_never_gets_the_token(make_settings, sqlite_url, slack, foreign):
    app = slack_app(make_settings, sqlite_url, slack)
    try:
        slack_post(app, slack_share(slack, foreign.url))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    assert foreign.requests == []
    assert content["text"] == "notes from the call"
    assert content["attachments"][0]["error"] == \
        "could not be downloaded: the file's address is not on Slack's file host"
    assert inbox_files(session) == []


def test_slack_without_the_token_is_sent_to_the_login_page(make_settings, slack):
    slack.add_file("call notes.txt", NOTES, "text/plain", file_id="F0NOTES001")
    wrong = SlackAdapter(make_settings(SLACK_BOT_TOKEN="xoxb-wrong", SLACK_SIGNING_SECRET=slack_api.SIGNING_SECRET,
                                       SLACK_API_BASE=slack.api))
    meta = {"file_id": "F0NOTES001", "name": "call notes.txt", "mime": "text/plain",
            "url": f"{slack.url}/files-pri/{slack_api.TEAM_ID}-F0NOTES001/download/call_notes.txt"}
    with pytest.raises(AttachmentError, match="HTTP 302"):
        wrong.fetch_attachment(meta)
    assert [r.path for r in slack.requests] == [f"/files-pri/{slack_api.TEAM_ID}-F0NOTES001/download/call_notes.txt"]


def test_slack_file_without_urls_is_looked_up_with_files_info(make_settings, slack):
    obj = slack.add_file("scan.png", b"\x89PNG\r\n\x1a\n" + os.urandom(200), "image/png")
    adapter = SlackAdapter(make_settings(SLACK_BOT_TOKEN=slack_api.TOKEN, SLACK_SIGNING_SECRET=slack_api.SIGNING_SECRET,
                                         SLACK_API_BASE=slack.api))
    name, data = adapter.fetch_attachment({"kind": "file", "file_id": obj["id"], "name": None, "mime": None,
                                           "size": None, "url": None})
    assert (name, data) == ("scan.png", slack.shared[obj["id"]][1])
    assert slack.calls("files.info") == [{"file": obj["id"]}]


# --- WhatsApp ----------------------------------------------------------------------------------------

WA_ID = "16505551234"
WA_SECRET = "wa-app-secret"


@pytest.fixture
def wa():
    with FakeWhatsApp() as fake:
        yield fake


def whatsapp_app(make_settings, sqlite_url, fake, **env):
    app = create_app(make_settings(DATABASE_URL=sqlite_url, WHATSAPP_TOKEN=whatsapp_api.TOKEN,
                                   WHATSAPP_APP_SECRET=WA_SECRET, WHATSAPP_VERIFY_TOKEN="v",
                                   WHATSAPP_PHONE_NUMBER_ID=whatsapp_api.PHONE_NUMBER_ID, WHATSAPP_API_BASE=fake.url,
                                   **env))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    for args in (("agent", "create", "Andy"), ("user", "add", f"whatsapp:{WA_ID}", "--role", "owner"),
                 ("wire", "whatsapp", WA_ID, "andy")):
        assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
    return app


def wa_post(app, payload: dict):
    body = json.dumps(payload).encode()
    sig = hmac.new(WA_SECRET.encode(), body, hashlib.sha256).hexdigest()
    resp = app.test_client().post("/webhooks/whatsapp", data=body, headers={
        "Content-Type": "application/json", "X-Hub-Signature-256": f"sha256={sig}"})
    assert resp.status_code == 200, resp.data


def test_whatsapp_document_is_fetched_through_its_media_url(make_settings, sqlite_url, wa):
    wa.add_media(NOTES, "text/plain", media_id="1212443365782512")
    app = whatsapp_app(make_settings, sqlite_url, wa)
    try:
        wa_post(app, fixture("whatsapp", "document_message"))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    [entry] = content["attachments"]
    assert entry == {"kind": "document", "name": "lease.txt", "mime": "text/plain", "size": len(NOTES),
                     "path": "/workspace/inbound/inbox/wamid.HBgLMTY1MDM4Nzk0MzkVAgASGBQzQjM3RDlBRkJDMUQ1QUZFQUU0MwA_"
                             "/lease.txt"}
    assert host_path(session, entry).read_bytes() == NOTES and content["text"] == "the signed lease"
    describe_call, download = [r for r in wa.requests if r.method == "GET"]
    assert describe_call.path == "/1212443365782512"
    assert download.path == "/whatsapp_business/attachments/" and download.query["mid"] == ["1212443365782512"]
    assert download.headers["authorization"] == f"Bearer {whatsapp_api.TOKEN}"


def test_whatsapp_image_without_a_name_is_named_by_its_type(make_settings, sqlite_url, wa):
    jpeg = b"\xff\xd8\xff\xe0" + os.urandom(900)
    wa.add_media(jpeg, "image/jpeg", media_id="1003383421387256")
    app = whatsapp_app(make_settings, sqlite_url, wa)
    try:
        wa_post(app, fixture("whatsapp", "image_message"))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    [entry] = content["attachments"]
    assert (entry["name"], entry["kind"]) == ("image.jpg", "image")
    assert host_path(session, entry).read_bytes() == jpeg


def test_whatsapp_media_url_on_a_foreign_host_never_gets_the_token(make_settings, sqlite_url, wa, foreign):
    wa.add_media(NOTES, "text/plain", media_id="1212443365782512")
    wa.media_url_base = foreign.url
    app = whatsapp_app(make_settings, sqlite_url, wa)
    try:
        wa_post(app, fixture("whatsapp", "document_message"))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    assert foreign.requests == [] and inbox_files(session) == []
    assert content["attachments"][0]["error"] == \
        "could not be downloaded: the media address is not on WhatsApp's media host"


def test_whatsapp_media_over_the_cap_is_not_downloaded(make_settings, sqlite_url, wa):
    wa.add_media(os.urandom(4096), "text/plain", media_id="1212443365782512")
    app = whatsapp_app(make_settings, sqlite_url, wa, NANOCLAW_ATTACHMENT_MAX_BYTES=1024)
    try:
        wa_post(app, fixture("whatsapp", "document_message"))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    assert content["attachments"][0]["error"] == "too large (4 KB > 1 KB)"
    assert not [r for r in wa.requests if r.path.startswith("/whatsapp_business/")] and inbox_files(session) == []


# --- Discord -----------------------------------------------------------------------------------------

DISCORD_USER, DISCORD_DM = "80351110224678912", "1349960312012886066"


@pytest.fixture
def discord():
    with FakeDiscord() as fake:
        yield fake


def discord_app(make_settings, sqlite_url, fake):
    app = create_app(make_settings(DATABASE_URL=sqlite_url, DISCORD_BOT_TOKEN=discord_api.TOKEN,
                                   DISCORD_PUBLIC_KEY="00" * 32, DISCORD_APPLICATION_ID=discord_api.BOT_ID,
                                   DISCORD_API_BASE=fake.url))
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    runner = app.test_cli_runner()
    for args in (("agent", "create", "Andy"), ("user", "add", f"discord:{DISCORD_USER}", "--role", "owner"),
                 ("wire", "discord", DISCORD_DM, "andy")):
        assert runner.invoke(args=["nanoclaw", *args]).exit_code == 0
    return app


def discord_payload(host: str) -> dict:
    """The attachment fixture with its CDN URLs moved to `host`."""
    text = json.dumps(fixture("discord", "gateway_message_attachment"))
    return json.loads(text.replace("https://cdn.discordapp.com", host).replace("https://media.discordapp.net", host))


def route_discord(app, payload: dict):
    from nanoclaw.platforms.discord.messages import message_to_event
    assert route(message_to_event(payload, bot_id=discord_api.BOT_ID), app.config["NANOCLAW"], NO_WAKE).written


def test_discord_attachment_comes_from_the_cdn_without_the_token(make_settings, sqlite_url, discord):
    minutes = b"# Minutes\n- budget approved\n- next call Thursday 10:00\n"
    discord.add_attachment(DISCORD_DM, "minutes.md", minutes, "text/markdown; charset=utf-8",
                           attachment_id="1350038506316795904")
    app = discord_app(make_settings, sqlite_url, discord)
    try:
        route_discord(app, discord_payload(discord.url))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    [entry] = content["attachments"]
    assert entry == {"name": "minutes.md", "mime": "text/markdown", "size": len(minutes),
                     "path": "/workspace/inbound/inbox/1350038506723512320/minutes.md"}
    assert host_path(session, entry).read_bytes() == minutes
    [cdn] = [r for r in discord.requests if r.path.startswith("/attachments/")]
    assert cdn.status == 200 and "authorization" not in cdn.headers


def test_discord_attachment_on_a_foreign_host_is_not_fetched(make_settings, sqlite_url, discord, foreign):
    app = discord_app(make_settings, sqlite_url, discord)
    try:
        route_discord(app, discord_payload(foreign.url))
        [(session, content)] = session_rows(app.config["NANOCLAW"])
    finally:
        database.close()
    assert foreign.requests == [] and inbox_files(session) == []
    assert content["text"] == "here are the minutes"
    assert content["attachments"][0]["error"] == "could not be downloaded: the file's address is not on Discord's CDN"


# --- the whole way: the agent reads the file inside a real sandbox ----------------------------------

def document_update(caption: str, name: str, file_id: str, size: int) -> dict:
    update = message(ALICE, person(ALICE, "Alice"), "")
    msg = update["message"]
    del msg["text"]
    msg.update(caption=caption, document={"file_name": name, "mime_type": "text/plain", "file_id": file_id,
                                          "file_unique_id": f"AgAD{file_id}", "file_size": size})
    return update


def test_the_agent_reads_the_file_inside_the_sandbox(make_settings, sqlite_url):
    """The first file is there before the sandbox starts; the second arrives while it runs."""
    from tests.fakes.model_api import Reply

    def model(req):
        results = req.turn_tool_results()
        if results:
            found = [word for word in ("1200 EUR", "Thursday") if word in results[0].text]
            return Reply.say("From your file: " + (found[0] if found else "nothing"))
        line = next(l for l in req.current_prompt().splitlines() if l.startswith("[attachment: "))
        return Reply.call("Read", file_path=line[len("[attachment: "):].split(" (", 1)[0])

    later = b"Follow-up: next call on Thursday.\n"
    with sandbox_service(make_settings, sqlite_url, model) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", f"telegram:{ALICE}", "--role", "owner")
        svc.cli("wire", "telegram", str(ALICE), "andy")
        svc.tg.add_file(NOTES, file_id="BQACnotes", file_path="documents/file_9.txt")
        svc.tg.add_file(later, file_id="BQAClater", file_path="documents/file_10.txt")
        first = document_update("what did we decide?", "notes.txt", "BQACnotes", len(NOTES))
        svc.post(first)
        [answer] = svc.wait(lambda: texts(svc.tg, ALICE), what="the agent's answer")
        call = svc.model.model_calls()[-1]
        svc.post(document_update("and this one?", "notes.txt", "BQAClater", len(later)))
        answers = svc.wait(lambda: texts(svc.tg, ALICE)[1:], what="the second answer")
    path = f"/workspace/inbound/inbox/{first['update_id']}/notes.txt"
    assert f"[attachment: {path} (text/plain, {len(NOTES)} bytes)]" in call.current_prompt()
    [result] = call.turn_tool_results()
    assert not result.is_error and "Decisions: ship on Friday." in result.text and "1200 EUR" in result.text
    assert answer == "From your file: 1200 EUR"
    assert answers == ["From your file: Thursday"]
