"""What the agent sends arrives as what it is (issue 30): a picture as a photo, a recording as audio,
anything else as a document, each with its caption; a picture the platform will not take as a photo
arrives as a document instead. Against the fake Bot API and Graph API, which check what the real
ones check (sendPhoto's size and dimensions, WhatsApp's media types and sizes, no caption on audio)."""
from __future__ import annotations

import io

import pytest
from PIL import Image

from nanoclaw.channels.base import DeliveryError
from nanoclaw.channels.files import Limits, sent_as
from nanoclaw.platforms.telegram.adapter import TelegramAdapter
from nanoclaw.platforms.whatsapp.adapter import WhatsAppAdapter
from nanoclaw.sessions.store import Target
from tests.fakes.telegram_api import TOKEN, FakeTelegram
from tests.fakes.whatsapp_api import PHONE_NUMBER_ID, FakeWhatsApp
from tests.fakes.whatsapp_api import TOKEN as WA_TOKEN

ALICE = "111222333"
WA_ID = "16505551234"


def png(path, size=(640, 480)):
    Image.new("RGB", size, "purple").save(path, "PNG")
    return path


@pytest.fixture
def telegram(make_settings):
    with FakeTelegram() as fake:
        yield fake, TelegramAdapter(make_settings(TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_WEBHOOK_SECRET="s" * 16,
                                                  TELEGRAM_API_BASE=fake.url))


@pytest.fixture
def whatsapp(make_settings):
    with FakeWhatsApp() as fake:
        yield fake, WhatsAppAdapter(make_settings(WHATSAPP_TOKEN=WA_TOKEN, WHATSAPP_APP_SECRET="s",
                                                  WHATSAPP_VERIFY_TOKEN="v", WHATSAPP_PHONE_NUMBER_ID=PHONE_NUMBER_ID,
                                                  WHATSAPP_API_BASE=fake.url))


def test_kinds_by_type_and_size():
    limits = Limits(picture_bytes=100, audio_types=("audio/mpeg",))
    assert sent_as("chart.png", 100, limits) == "picture"
    assert sent_as("chart.png", 101, limits) == "document"
    assert sent_as("song.mp3", 5, limits) == "audio" and sent_as("clip.wav", 5, limits) == "document"
    assert sent_as("anim.gif", 5, limits) == "document" and sent_as("report.pdf", 5, limits) == "document"


# --- Telegram ---------------------------------------------------------------------------------

def test_telegram_picture_is_a_photo_with_its_caption(telegram, tmp_path):
    fake, adapter = telegram
    message_id = adapter.send_file(Target("telegram", ALICE), png(tmp_path / "chart.png"), "this week's chart")
    [photo] = fake.calls("sendPhoto")
    assert photo["caption"] == "this week's chart" and photo["_files"]["photo"][0] == "chart.png"
    assert fake.calls("sendDocument") == [] and message_id.isdigit()


def test_telegram_picture_it_will_not_take_as_a_photo_goes_as_a_document(telegram, tmp_path):
    fake, adapter = telegram
    banner = png(tmp_path / "banner.png", (12000, 100))  # past sendPhoto's dimensions
    adapter.send_file(Target("telegram", ALICE), banner, "the banner")
    assert fake.calls("sendPhoto") == []  # refused by the fake as by Telegram: PHOTO_INVALID_DIMENSIONS
    [doc] = fake.calls("sendDocument")
    assert doc["_files"]["document"][0] == "banner.png" and doc["caption"] == "the banner"


def test_telegram_voice_recording_and_music(telegram, tmp_path):
    fake, adapter = telegram
    (tmp_path / "reply.ogg").write_bytes(b"OggS" + bytes(400))
    (tmp_path / "song.mp3").write_bytes(b"ID3" + bytes(400))
    (tmp_path / "notes.txt").write_text("plain")
    for name in ("reply.ogg", "song.mp3", "notes.txt"):
        adapter.send_file(Target("telegram", ALICE), tmp_path / name, None)
    assert [c["_files"]["voice"][0] for c in fake.calls("sendVoice")] == ["reply.ogg"]
    assert [c["_files"]["audio"][0] for c in fake.calls("sendAudio")] == ["song.mp3"]
    assert [c["_files"]["document"][0] for c in fake.calls("sendDocument")] == ["notes.txt"]


def test_telegram_a_missing_chat_is_not_retried_as_a_document(telegram, tmp_path):
    fake, adapter = telegram
    fake.fail_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"})
    with pytest.raises(DeliveryError) as err:
        adapter.send_file(Target("telegram", "999"), png(tmp_path / "a.png"), None)
    assert err.value.permanent and fake.calls("sendDocument") == []


# --- WhatsApp ---------------------------------------------------------------------------------

def test_whatsapp_picture_is_an_image_message_with_its_caption(whatsapp, tmp_path):
    fake, adapter = whatsapp
    out = io.BytesIO()
    Image.new("RGB", (800, 600), "green").save(out, "JPEG")
    (tmp_path / "plant.jpg").write_bytes(out.getvalue())
    adapter.send_file(Target("whatsapp", WA_ID), tmp_path / "plant.jpg", "is this the one?")
    [image] = fake.messages("image")
    assert image["image"]["caption"] == "is this the one?" and fake.messages("document") == []
    assert fake.uploaded[image["image"]["id"]][0] == "image/jpeg"


def test_whatsapp_audio_goes_as_audio_and_its_caption_follows_as_text(whatsapp, tmp_path):
    fake, adapter = whatsapp
    (tmp_path / "memo.mp3").write_bytes(b"ID3" + bytes(1000))
    adapter.send_file(Target("whatsapp", WA_ID), tmp_path / "memo.mp3", "the recording")
    [audio] = fake.messages("audio")
    assert "caption" not in audio["audio"]
    assert [m["text"]["body"] for m in fake.messages("text")] == ["the recording"]


def test_whatsapp_image_refused_goes_as_a_document(whatsapp, tmp_path):
    fake, adapter = whatsapp
    fake.fail_next(400, {"error": {"message": "(#131053) Media upload error", "type": "OAuthException",
                                   "code": 131053}}, match=lambda r: (r.json or {}).get("type") == "image")
    adapter.send_file(Target("whatsapp", WA_ID), png(tmp_path / "scan.png"), "the scan")
    [doc] = fake.messages("document")
    assert doc["document"]["filename"] == "scan.png" and doc["document"]["caption"] == "the scan"


def test_whatsapp_webp_is_not_an_image_message(whatsapp, tmp_path):
    fake, adapter = whatsapp
    Image.new("RGB", (64, 64)).save(tmp_path / "s.webp", "WEBP")
    adapter.send_file(Target("whatsapp", WA_ID), tmp_path / "s.webp", None)
    assert fake.messages("image") == [] and len(fake.messages("document")) == 1
