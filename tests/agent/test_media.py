"""What the model sees of a sent file (issue 30): pictures decoded and scaled in the sandbox's own
worker process, PDFs as documents, voice notes as their transcript, and every refusal as a line
the agent can pass on. Real files made with Pillow; the worker is the real subprocess."""
from __future__ import annotations

import base64
import io
import os
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from PIL import Image

from agent_runner import media
from agent_runner.attachments import attachment_line
from agent_runner.poll_loop import build_turn
from agent_runner.selection import InboundRow

INBOX = "/workspace/inbound/inbox"


def decoded(block: dict) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(block["source"]["data"])))


def picture(path, size=(800, 600), mode="RGB", fmt=None, color="teal") -> str:
    Image.new(mode, size, color).save(path, fmt)
    return str(path)


def row(seq: int, text: str, *attachments: dict) -> InboundRow:
    return InboundRow(id=f"m{seq}", seq=seq, kind="chat", timestamp="2026-11-26T09:00:00.000Z", trigger=True, tries=0,
                      content={"text": text, "sender": "Olivia", "attachments": list(attachments)})


def saved(inbound, folder: str, name: str, data: bytes, **facts) -> dict:
    """A file the host saved in inbox/ and the entry it wrote for it."""
    where = inbound / "inbox" / folder
    where.mkdir(parents=True, exist_ok=True)
    (where / name).write_bytes(data)
    return {"name": name, "size": len(data), "path": f"{INBOX}/{folder}/{name}", **facts}


def png_bytes(size=(640, 480), mode="RGB", color="orange") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, color).save(out, "PNG")
    return out.getvalue()


# --- one picture ------------------------------------------------------------------------------

def test_a_large_photo_is_scaled_to_the_long_edge_never_cropped(tmp_path):
    block, why = media.image_block(picture(tmp_path / "wide.jpg", (4032, 3024)))
    assert why is None and block["source"]["media_type"] == "image/jpeg"
    assert decoded(block).size == (1568, 1176)  # 4:3 kept


def test_a_small_picture_keeps_its_size_and_transparency(tmp_path):
    block, why = media.image_block(picture(tmp_path / "logo.png", (300, 120), "RGBA", color=(0, 0, 0, 0)))
    assert why is None and block["source"]["media_type"] == "image/png"
    image = decoded(block)
    assert image.size == (300, 120) and image.mode == "RGBA"


def test_a_screenshot_stays_lossless_and_a_photo_becomes_jpeg(tmp_path):
    shot, _ = media.image_block(picture(tmp_path / "screen.png", (2400, 1080)))
    photo, _ = media.image_block(picture(tmp_path / "photo.jpg", (2400, 1080)))
    assert shot["source"]["media_type"] == "image/png" and decoded(shot).size == (1568, 706)
    assert photo["source"]["media_type"] == "image/jpeg"


def test_heic_from_a_phone_is_converted(tmp_path):
    import pillow_heif
    pillow_heif.register_heif_opener()
    path = tmp_path / "IMG_0042.HEIC"
    Image.new("RGB", (2000, 1500), "navy").save(path, "HEIF")
    block, why = media.image_block(str(path))
    assert why is None and block["source"]["media_type"] == "image/jpeg" and decoded(block).size == (1568, 1176)


def test_exif_rotation_is_applied(tmp_path):
    path = tmp_path / "portrait.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to view: stored landscape, shown portrait
    Image.new("RGB", (400, 300), "red").save(path, exif=exif)
    block, _ = media.image_block(str(path))
    assert decoded(block).size == (300, 400)


def test_a_decompression_bomb_is_refused_before_it_is_decoded(tmp_path):
    # 20,000 x 20,000 one-bit pixels: 50 KB on disk, 400 million pixels once decoded
    block, why = media.image_block(picture(tmp_path / "bomb.png", (20000, 20000), "1", color=0))
    assert block is None and "40 million" in why


def test_a_picture_just_over_the_pixel_limit_is_refused(tmp_path):
    block, why = media.image_block(picture(tmp_path / "big.png", (7000, 7000), "1", color=0))
    assert block is None and "7000x7000" in why


def test_the_workers_memory_cap_and_time_limit_stop_a_hostile_picture(tmp_path, monkeypatch):
    """A 38-megapixel PNG of 125 KB (under the pixel limit) takes hundreds of MB to decode: with
    less memory than that, or less time, its worker ends and the turn says why; the next picture
    is read as ever."""
    bomb = picture(tmp_path / "flat.png", (7000, 5500), color="white")
    assert os.path.getsize(bomb) < 200_000
    block, why = media.image_block(bomb)  # within the real caps it is shown, scaled
    assert why is None and max(decoded(block).size) == media.LONG_EDGE
    monkeypatch.setattr(media, "WORKER_MEMORY", 256 << 20)
    assert media.image_block(bomb) == (None, "it needs more memory to read than an image may take here")
    monkeypatch.setattr(media, "WORKER_TIMEOUT_S", 0.05)
    assert media.image_block(bomb) == (None, "it took too long to read")
    monkeypatch.undo()
    block, why = media.image_block(picture(tmp_path / "next.png"))
    assert why is None and decoded(block).size == (800, 600)


def test_a_turn_carries_no_more_picture_bytes_than_a_request_takes(tmp_path):
    """Noise does not compress: 16 phone photos of it pass the turn's cap, and the ones past it
    are named with why."""
    import random
    inbound = tmp_path / "inbound"
    rng = random.Random(7)
    rows = []
    for i in range(1, 17):
        out = io.BytesIO()
        Image.frombytes("RGB", (1568, 1176), rng.randbytes(1568 * 1176 * 3)).save(out, "JPEG", quality=95)
        rows.append(row(i, "", saved(inbound, f"m{i}", "noise.jpg", out.getvalue(), mime="image/jpeg")))
    prompt, blocks = build_turn(rows, "UTC", [], inbound)
    carried = sum(len(b["source"]["data"]) for b in blocks)
    assert carried <= media.MAX_TURN_BYTES and 0 < len(blocks) < 16
    assert prompt.count("not shown to you: this turn carries as much as the model takes") == 16 - len(blocks)


def test_a_broken_file_is_a_reason_not_a_crash(tmp_path):
    good = png_bytes()
    (tmp_path / "cut.png").write_bytes(good[: len(good) // 2])
    (tmp_path / "not.jpg").write_bytes(b"<html>login page</html>")
    for name in ("cut.png", "not.jpg", "missing.png"):
        block, why = media.image_block(str(tmp_path / name))
        assert block is None and why.startswith("it ")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=4096),
                      st.builds(lambda cut, junk: png_bytes((64, 64))[:cut] + junk,
                                st.integers(0, 400), st.binary(max_size=64))))
def test_any_bytes_give_a_block_or_a_reason(tmp_path, data):
    path = tmp_path / "sent.png"
    path.write_bytes(data)
    block, why = media.image_block(str(path))
    assert (block is None) != (why is None)
    if block is not None:
        assert decoded(block).size[0] <= media.LONG_EDGE


# --- PDFs -------------------------------------------------------------------------------------

def pdf(path, pages: int, object_streams: bool = False) -> bytes:
    """A PDF as common tools write it: Pillow's writer (a classic cross-reference table), then,
    when asked, rewritten by qpdf with its pages in compressed object streams (PDF 1.5, what
    pdfTeX and office exporters write)."""
    sheets = [Image.new("RGB", (60, 80), "white") for _ in range(pages)]
    plain = path.with_suffix(".plain.pdf")
    sheets[0].save(plain, "PDF", save_all=True, append_images=sheets[1:])
    if object_streams:
        subprocess.run(["qpdf", "--object-streams=generate", str(plain), str(path)], check=True)
    else:
        plain.replace(path)
    return path.read_bytes()


@pytest.mark.parametrize("object_streams", [False, True], ids=["xref-table", "object-streams"])
def test_a_pdf_is_a_document_block_within_the_page_limit(tmp_path, object_streams):
    lease = pdf(tmp_path / "lease.pdf", 3, object_streams)
    manual = pdf(tmp_path / "manual.pdf", 150, object_streams)
    if object_streams:  # the pages are not in the file's plain bytes at all
        assert b"/Type /Page" not in manual and b"/Type/Page" not in manual
    block, why = media.pdf_block(str(tmp_path / "lease.pdf"))
    assert why is None and block["type"] == "document" and base64.b64decode(block["source"]["data"]) == lease
    assert media.pdf_block(str(tmp_path / "manual.pdf")) == (None, "it has 150 pages, more than the 100 the model takes")


def test_a_file_that_only_claims_to_be_a_pdf_says_why(tmp_path):
    (tmp_path / "fake.pdf").write_bytes(b"MZ\x90\x00")
    (tmp_path / "cut.pdf").write_bytes(pdf(tmp_path / "whole.pdf", 3, True)[:300])
    (tmp_path / "empty.pdf").write_bytes(b"%PDF-1.7\n%%EOF\n")
    assert media.pdf_block(str(tmp_path / "fake.pdf")) == (None, "it is not a PDF")
    for name in ("cut.pdf", "empty.pdf"):
        block, why = media.pdf_block(str(tmp_path / name))
        assert block is None and why.startswith("it could not be read as a PDF"), (name, why)


def test_a_pdf_that_floods_the_parser_costs_only_its_worker(tmp_path):
    # a page tree that points at itself, thousands deep: pypdf must stop or fail inside the worker
    loops = b"".join(b"%d 0 obj << /Type /Pages /Kids [%d 0 R] /Count 1 >> endobj\n" % (i, i + 1)
                     for i in range(2, 20_000)) + b"20000 0 obj << /Type /Pages /Kids [2 0 R] /Count 1 >> endobj\n"
    (tmp_path / "loop.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n" + loops
                                        + b"trailer << /Root 1 0 R >>\n%%EOF\n")
    block, why = media.pdf_block(str(tmp_path / "loop.pdf"))
    assert block is None and why.startswith(("it could not be read as a PDF", "it took too long"))


# --- a turn's prompt and blocks --------------------------------------------------------------

def test_a_turn_carries_its_pictures_and_says_which_is_which(tmp_path):
    inbound = tmp_path / "inbound"
    first = saved(inbound, "telegram_1", "photo_1.jpg", png_bytes(), mime="image/jpeg", kind="photo")
    second = saved(inbound, "telegram_2", "receipt.png", png_bytes(color="white"), mime="image/png")
    notes = saved(inbound, "telegram_2", "notes.txt", b"milk\n", mime="text/plain")
    prompt, blocks = build_turn([row(1, "what is this?", first), row(2, "and this", second, notes)], "UTC", [], inbound)
    assert [b["type"] for b in blocks] == ["image", "image"]
    assert "photo_1.jpg (image/jpeg, " in prompt and "shown to you as image 1 below" in prompt
    assert "receipt.png" in prompt and "shown to you as image 2 below" in prompt
    assert "notes.txt (text/plain, 5 bytes)]" in prompt  # a plain file stays a path


def test_a_picture_that_cannot_be_shown_says_why(tmp_path):
    inbound = tmp_path / "inbound"
    broken = saved(inbound, "wa_1", "image.jpeg", b"\xff\xd8\xff garbage", mime="image/jpeg", kind="image")
    prompt, blocks = build_turn([row(1, "look", broken)], "UTC", [], inbound)
    assert blocks == [] and "not shown to you: it could not be read as an image" in prompt


def test_more_pictures_than_a_turn_takes_are_named_not_shown(tmp_path):
    inbound = tmp_path / "inbound"
    one = png_bytes((32, 32))
    rows = [row(i, "", saved(inbound, f"m{i}", "p.png", one, mime="image/png")) for i in range(1, media.MAX_IMAGES + 3)]
    prompt, blocks = build_turn(rows, "UTC", [], inbound)
    assert len(blocks) == media.MAX_IMAGES
    assert prompt.count(f"more than {media.MAX_IMAGES} pictures in one turn") == 2


def test_only_files_inside_the_inbox_are_read():
    assert media.local_path(f"{INBOX}/x/p.png", "/in") is not None
    for path in ("/etc/passwd", f"{INBOX}/../inbound.db", f"{INBOX}/x/../../inbound.db", "/workspace/inbound/inbound.db",
                 INBOX, ""):
        assert media.local_path(path, "/in") is None, path


# --- voice notes ------------------------------------------------------------------------------

def test_a_transcript_reads_as_the_persons_words_marked_with_its_length():
    line = attachment_line({"kind": "voice", "name": "voice.oga", "mime": "audio/ogg", "duration": 12,
                            "path": f"{INBOX}/t_9/voice.oga", "transcript": "Remind me to call mum at six."})
    assert line.startswith("[voice note, 0:12; transcript below; the recording is at /workspace/inbound/inbox/t_9/")
    assert "\nRemind me to call mum at six.\n" in line


def test_a_voice_note_that_could_not_be_heard_says_so():
    line = attachment_line({"kind": "voice", "name": "voice.oga", "duration": 75, "path": f"{INBOX}/t/voice.oga",
                            "transcript_error": "no speech-to-text service is set up on this NanoClaw"})
    assert line.startswith("[voice note, 1:15 at ") and "could not be heard (no speech-to-text service" in line
    silent = attachment_line({"kind": "audio", "name": "a.mp3", "path": f"{INBOX}/t/a.mp3", "transcript": ""})
    assert silent == f"[audio file at {INBOX}/t/a.mp3: no words could be made out]"


def test_the_runner_needs_no_pillow_outside_the_worker():
    # the runner imports media.py at start; only the worker process loads Pillow
    import subprocess
    import sys
    code = "import sys, agent_runner.poll_loop; print('PIL' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ}, check=True).stdout.strip()
    assert out == "False"


@pytest.mark.parametrize("entry", [{"mime": "image/webp", "kind": "sticker"}, {"kind": "photo"},
                                   {"name": "IMG_1.HEIC"}, {"mime": "image/heic"}])
def test_pictures_are_known_by_type(entry):
    assert media.is_image(entry)


@pytest.mark.parametrize("entry", [{"mime": "application/x-tgsticker", "kind": "sticker"},
                                   {"mime": "video/webm", "kind": "sticker"}, {"mime": "video/mp4", "name": "a.jpg"},
                                   {"name": "report.csv"}])
def test_moving_stickers_and_videos_are_not_pictures(entry):
    assert not media.is_image(entry)


@pytest.mark.parametrize("fmt, ext", [("GIF", "gif"), ("WEBP", "webp"), ("BMP", "bmp"), ("TIFF", "tif"),
                                      ("AVIF", "avif"), ("JPEG", "jpg"), ("PNG", "png")])
def test_every_format_the_readme_names_is_shown(tmp_path, fmt, ext):
    block, why = media.image_block(picture(tmp_path / f"sent.{ext}", (100, 80), fmt=fmt, color="red"))
    assert why is None and decoded(block).size == (100, 80)
