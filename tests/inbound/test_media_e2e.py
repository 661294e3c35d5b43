"""End to end, both runtimes (issue 30): a Telegram photo with a caption reaches the model as an
image block of that photo, scaled in the sandbox; a PDF within the model's page limit as a
document block, one past it as its path and why; a voice note reaches it as its transcript from an
OpenAI-compatible service (a fake one on 127.0.0.1) and is answered with a voice note (sendVoice)
spoken by the same service, its text as the caption; and a PNG the agent makes and sends with
send_file arrives as a photo (sendPhoto). The real runner, SDK and CLI in a real sandbox, the
proxy, the scripted model, the fake Bot API."""
from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from tests.agent.test_media import pdf
from tests.fakes.model_api import Reply
from tests.fakes.speech_api import SAID, FakeSpeech
from tests.inbound.test_attachments import ALICE, fixture
from tests.tg_flow import sandbox_service, sent

KEY = "sk-speech-e2e-0123456789"
MAKE_CHART = ("python3 -c \"from PIL import Image; Image.new('RGB', (320, 200), 'orange').save('chart.png')\"")


def brain(req):
    prompt, results = req.current_prompt(), req.turn_tool_results()
    if "send me a chart" in prompt:
        if not results:
            return Reply.call("Bash", command=MAKE_CHART)
        if len(results) == 1:
            return Reply.call("mcp__nanoclaw__send_file", path="chart.png", text="here is your chart")
        return Reply.say("Sent.")
    if SAID in prompt:
        return Reply.say("Oat milk it is.")
    if "please file this" in prompt and req.blocks("document"):
        return Reply.say("Filed: a three-page lease.")
    if "read the manual" in prompt:
        return Reply.say("The manual is too long to read whole.")
    if "what is this?" in prompt and req.blocks("image"):  # (later requests carry it as history)
        return Reply.say("A picture of a cable.")
    return Reply.say("Hm?")


def photo_jpeg() -> bytes:
    out = io.BytesIO()
    image = Image.new("RGB", (2000, 1500), "white")
    image.paste((200, 30, 30), (0, 0, 1000, 1500))  # left half red: the model must get this picture
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


@pytest.mark.parametrize("runtime", ["bwrap", "docker"])
def test_photo_voice_and_a_picture_back(make_settings, sqlite_url, runtime, tmp_path):
    with FakeSpeech(key=KEY) as speech, sandbox_service(
            make_settings, sqlite_url, brain, runtime=runtime, NANOCLAW_TRANSCRIBE_URL=speech.base,
            NANOCLAW_TRANSCRIBE_API_KEY=KEY, NANOCLAW_TTS_URL=speech.base, NANOCLAW_TTS_API_KEY=KEY) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", f"telegram:{ALICE}", "--role", "owner")
        svc.cli("wire", "telegram", str(ALICE), "andy")

        photo = fixture("telegram", "album_photo_1")
        del photo["message"]["media_group_id"]
        photo["message"]["caption"] = "what is this?"
        svc.tg.add_file(photo_jpeg(), file_id="AgACAgIAAxk-a1-x", file_path="photos/file_1.jpg")
        svc.post(photo)
        svc.wait(lambda: "A picture of a cable." in [m["text"] for m in sent(svc.tg)], what="the photo's answer")
        call = next(c for c in svc.model.model_calls() if c.blocks("image"))
        [image] = call.blocks("image")
        seen = Image.open(io.BytesIO(base64.b64decode(image["source"]["data"])))
        assert image["source"]["media_type"] == "image/jpeg" and seen.size == (1568, 1176)
        assert seen.getpixel((100, 600))[0] > 150 and seen.getpixel((1400, 600))[1] > 200  # red left, white right
        assert "what is this?" in call.current_prompt() and "shown to you as image 1 below" in call.current_prompt()

        # PDFs as pdfTeX and office exporters write them (pages in object streams): 3 pages are a
        # document block; 150, past the model's 100, are the path and why, and the turn still answers
        for name, pages, caption, file_id, answer in (
                ("lease.pdf", 3, "please file this", "BQACAgIAAxkBAAIBZ2V", "Filed: a three-page lease."),
                ("manual.pdf", 150, "read the manual", "BQACAgIAAxkBAAIBmanual", "The manual is too long to read whole.")):
            data = pdf(tmp_path / name, pages, object_streams=True)
            document = fixture("telegram", "document_message")
            document["update_id"] += pages
            document["message"].update(message_id=100 + pages, caption=caption)
            document["message"]["document"].update(file_name=name, file_id=file_id, file_size=len(data))
            svc.tg.add_file(data, file_id=file_id, file_path=f"documents/{name}")
            svc.post(document)
            svc.wait(lambda: answer in [m["text"] for m in sent(svc.tg)], what=f"the answer to {name}")
        manual = next(c for c in svc.model.model_calls() if "read the manual" in c.current_prompt())
        assert "manual.pdf (application/pdf, " in manual.current_prompt()
        assert "not shown to you: it has 150 pages, more than the 100 the model takes" in manual.current_prompt()
        assert len(manual.blocks("document")) == 1  # the lease's, from the conversation so far; not the manual

        voice = fixture("telegram", "voice_message")
        svc.tg.add_file(b"OggS" + bytes(2048), file_id="AwACAgIAAxkBAAIBvoice", file_path="voice/file_2.oga")
        svc.post(voice)
        # a voice note is answered with one: sendVoice, spoken by the text-to-speech service, its
        # caption the answer's text (short enough: nothing follows as a message)
        [answer] = svc.wait(lambda: svc.tg.calls("sendVoice"), what="the voice note's spoken answer")
        assert answer["caption"] == "Oat milk it is." and answer["_files"]["voice"][0].endswith(".ogg")
        assert answer["_files"]["voice"][1] == b"OggS\x00\x02" + bytes(20) + b"Oat milk it is."
        assert speech.spoken() == [{"model": "tts-1", "input": "Oat milk it is.", "voice": "alloy",
                                    "response_format": "opus"}]
        assert "Oat milk it is." not in [m["text"] for m in sent(svc.tg)]
        heard = next(c for c in svc.model.model_calls() if SAID in c.current_prompt())
        assert "[voice note, 0:07; transcript below" in heard.current_prompt()
        assert KEY not in "".join(c.all_text() for c in svc.model.model_calls())
        assert len(speech.transcriptions()) == 1

        svc.post(fixture("telegram", "private_message") | {"update_id": 900000099} | {
            "message": {**fixture("telegram", "private_message")["message"], "text": "send me a chart",
                        "message_id": 99}})
        svc.wait(lambda: svc.tg.calls("sendPhoto"), what="the chart as a photo")
        [chart] = svc.tg.calls("sendPhoto")
        assert chart["caption"] == "here is your chart" and chart["_files"]["photo"][0] == "chart.png"
        assert Image.open(io.BytesIO(chart["_files"]["photo"][1])).size == (320, 200)
        assert svc.tg.calls("sendDocument") == []
        assert len(svc.tg.calls("sendVoice")) == 1 and len(speech.spoken()) == 1  # typed messages get text


def album_brain(req):
    pictures = len(req.blocks("image"))
    return Reply.say(f"{pictures} photo(s) in this turn.")


@pytest.mark.parametrize("slow_s", [0.0, 3.0], ids=["quick", "second-still-downloading"])
def test_an_album_reaches_the_model_in_one_request(make_settings, sqlite_url, slow_s):
    """Telegram sends an album as one update per photo. The model gets one request with both
    pictures, also when the second is still downloading after the first one's wait has ended."""
    with sandbox_service(make_settings, sqlite_url, album_brain) as svc:
        svc.cli("agent", "create", "Andy")
        svc.cli("user", "add", f"telegram:{ALICE}", "--role", "owner")
        svc.cli("wire", "telegram", str(ALICE), "andy")
        for n, color in ((1, "red"), (2, "blue")):
            out = io.BytesIO()
            Image.new("RGB", (640, 480), color).save(out, "JPEG")
            svc.tg.add_file(out.getvalue(), file_id=f"AgACAgIAAxk-a{n}-x", file_path=f"photos/album_{n}.jpg")
        svc.tg.slow_download("photos/album_2.jpg", slow_s)
        svc.post(fixture("telegram", "album_photo_1"))
        svc.post(fixture("telegram", "album_photo_2"))  # returns once routed: after its download
        svc.wait(lambda: sent(svc.tg), what="the answer")
        svc.settled(ALICE, {"id": ALICE, "is_bot": False, "first_name": "Alice"})
        assert [m["text"] for m in sent(svc.tg)][:-1] == ["2 photo(s) in this turn."]
        [call] = [c for c in svc.model.model_calls() if c.blocks("image") and "sentinel" not in c.current_prompt()]
        colors = [Image.open(io.BytesIO(base64.b64decode(b["source"]["data"]))).getpixel((10, 10))
                  for b in call.blocks("image")]
        assert colors[0][0] > 200 > colors[0][2] and colors[1][2] > 200 > colors[1][0]  # red, then blue
