"""The web chat takes files too (issue 30): a picture attached on the page shows in the
conversation and reaches the agent's inbox like a platform's file; only a logged-in person may send
more than the page's usual 1 MiB, and never more than NANOCLAW_ATTACHMENT_MAX_BYTES a file."""
from __future__ import annotations

import io
import json
import os

from PIL import Image

from nanoclaw.models import Session, WebMessage
from nanoclaw.sessions import session_schema as schema
from tests.web.test_admin import login, owner, site, token_for  # noqa: F401  (fixtures)


def jpeg(size=(1200, 900)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, "salmon").save(out, "JPEG", quality=95)
    return out.getvalue()


def inbound_rows(settings) -> list[tuple]:
    session = Session.select().first()
    path = settings.sessions_dir / session.agent_group.folder / session.id
    conn = schema.connect(path / "host" / schema.INBOUND, readonly=True)
    try:
        return [(path, json.loads(r["content"])) for r in conn.execute("SELECT content FROM messages_in ORDER BY seq")]
    finally:
        conn.close()


def send(client, text="", files=(), accept="application/json"):
    data = {"csrf_token": token_for(client, "/chat/andy"), "text": text,
            "file": [(io.BytesIO(body), name) for name, body in files]}
    return client.post("/chat/andy", data=data, content_type="multipart/form-data", headers={"Accept": accept})


def test_a_picture_from_the_page_reaches_the_inbox_and_shows_in_the_chat(owner, site):  # noqa: F811
    photo = jpeg()
    resp = send(owner, "what plant is this?", [("IMG_2231.jpg", photo)])
    assert resp.status_code == 200, resp.get_data(as_text=True)
    shown = resp.get_json()["messages"]
    assert [(m["file"], m["text"]) for m in shown] == [("IMG_2231.jpg", ""), (None, "what plant is this?")]
    [(path, content)] = inbound_rows(site.config["NANOCLAW"])
    [entry] = content["attachments"]
    assert entry["name"] == "IMG_2231.jpg" and entry["mime"] == "image/jpeg" and entry["size"] == len(photo)
    assert (path / "host" / entry["path"][len("/workspace/inbound/"):]).read_bytes() == photo
    assert "web_file" not in entry  # where the page keeps it is the host's business
    download = owner.get(f"/chat/andy/file/{shown[0]['id']}")
    assert download.status_code == 200 and download.data == photo


def test_a_file_alone_is_a_message(owner, site):  # noqa: F811
    assert send(owner, "", [("scan.pdf", b"%PDF-1.4\n%%EOF\n")]).status_code == 200
    [(_path, content)] = inbound_rows(site.config["NANOCLAW"])
    assert content["text"] == "" and content["attachments"][0]["name"] == "scan.pdf"


def test_an_upload_over_the_attachment_limit_is_told_not_saved(site, make_settings):  # noqa: F811
    site.config["NANOCLAW"] = settings = make_settings(DATABASE_URL=site.config["NANOCLAW"].database_url,
                                                       NANOCLAW_ATTACHMENT_MAX_BYTES="1048576")
    client = site.test_client()
    assert login(client).status_code == 302
    big = b"\0" * (1024 * 1024 + 1)
    assert send(client, "", [("huge.bin", big)]).status_code == 200
    [(_path, content)] = inbound_rows(settings)
    assert content["attachments"][0]["error"].startswith("too large")


def test_more_than_a_mebibyte_from_a_stranger_is_refused_unread(site):  # noqa: F811
    client = site.test_client()
    body = b"x" * (2 * 1024 * 1024)
    resp = client.post("/chat/andy", data={"text": "hi", "file": [(io.BytesIO(body), "a.bin")]},
                       content_type="multipart/form-data")
    assert resp.status_code == 413
    assert WebMessage.select().count() == 0


def test_a_logged_in_photo_of_several_megabytes_is_taken(owner, site):  # noqa: F811
    out = io.BytesIO()
    Image.frombytes("RGB", (1000, 1000), os.urandom(3_000_000)).save(out, "JPEG", quality=95)  # a noisy photo
    big = out.getvalue()
    assert len(big) > 1024 * 1024
    assert send(owner, "", [("big.jpg", big)]).status_code == 200
    [(_path, content)] = inbound_rows(site.config["NANOCLAW"])
    assert content["attachments"][0]["size"] == len(big)
