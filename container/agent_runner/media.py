"""What the model sees of a file someone sent: an image as an image block, a PDF as a document
block, within the model's limits; anything else, and anything past a limit, stays a line with the
file's path (and why).

An image is decoded and scaled here, in the sandbox, never on the host, and in a process of its own
(`python -m agent_runner.media_worker`) with a memory cap and a time limit: a hostile file (a
decompression bomb, a decoder bug) can at worst cost that one image, and the turn says so. Scaled
down, never cropped, to a long edge of 1568 px; a drawn picture (a PNG, GIF or BMP, or one with
transparency: screenshots, diagrams) stays lossless PNG while it is small enough, a photo becomes
JPEG; HEIC and other formats Pillow can read are converted the same way. A PDF's pages are counted
by the same worker with pypdf, so one kept in compressed object streams (PDF 1.5 and later: what
pdfTeX and office exporters write) is measured like any other.
"""
from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path, PurePosixPath

LONG_EDGE = 1568
MAX_PIXELS = 40_000_000          # what a sent image may have before it is decoded at all
MAX_IMAGE_BYTES = 3_750_000      # the encoded image (5 MB once base64'd, the API's cap)
MAX_IMAGES = 20                  # per turn
MAX_TURN_BYTES = 24 * 1024 * 1024  # of base64 in one turn's blocks: the API takes 32 MB a request
MAX_PDF_BYTES = 20 * 1024 * 1024
MAX_PDF_PAGES = 100
WORKER_MEMORY = 768 * 1024 * 1024
WORKER_TIMEOUT_S = 30
IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/heif", "image/bmp",
               "image/tiff", "image/avif")
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".heic", ".heif", ".bmp", ".tif", ".tiff", ".avif")


def is_image(attachment: dict) -> bool:
    """A picture by its type (an animated sticker or a video is not one)."""
    mime = str(attachment.get("mime") or "").lower()
    name = str(attachment.get("name") or "").lower()
    return mime in IMAGE_TYPES or (not mime and (attachment.get("kind") == "photo" or name.endswith(IMAGE_EXTENSIONS)))


def is_pdf(attachment: dict) -> bool:
    return str(attachment.get("mime") or "").lower() == "application/pdf" or \
        str(attachment.get("name") or "").lower().endswith(".pdf")


def worker(*args: str) -> tuple[dict, str | None]:
    """(the worker's answer, None), or ({}, why not): one file read in a process of its own."""
    try:
        done = subprocess.run([sys.executable, "-m", "agent_runner.media_worker", "--memory", str(WORKER_MEMORY),
                               *args], capture_output=True, timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {}, "it took too long to read"
    except OSError as exc:
        return {}, f"it could not be read ({type(exc).__name__})"
    try:
        answer = json.loads(done.stdout or b"{}")
    except ValueError:
        answer = {}
    if done.returncode != 0 or not isinstance(answer, dict) or "error" in answer:
        return {}, (answer.get("error") if isinstance(answer, dict) else None) or "it could not be read"
    return answer, None


def image_block(path: str) -> tuple[dict | None, str | None]:
    """(an image content block, None), or (None, why not): decoded in a worker process."""
    answer, why = worker(path)
    if why is not None or "data" not in answer:
        return None, why or "it could not be read as an image"
    return {"type": "image", "source": {"type": "base64", "media_type": answer["media_type"],
                                        "data": answer["data"]}}, None


def pdf_block(path: str) -> tuple[dict | None, str | None]:
    """(a document block, None), or (None, why not): within the model's size and page limits."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return None, f"it could not be read ({type(exc).__name__})"
    if len(data) > MAX_PDF_BYTES:
        return None, f"it is over {MAX_PDF_BYTES >> 20} MB, more than the model takes"
    if not data.startswith(b"%PDF"):
        return None, "it is not a PDF"
    # counted by a real parser (pages in compressed object streams too), in the worker, with its limits
    answer, why = worker("--pdf", path)
    if why is not None:
        return None, why
    pages = answer.get("pages")
    if not isinstance(pages, int) or pages < 1:
        return None, "it could not be read as a PDF"
    if pages > MAX_PDF_PAGES:
        return None, f"it has {pages} pages, more than the {MAX_PDF_PAGES} the model takes"
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": base64.b64encode(data).decode()}}, None


def local_path(sandbox_path: str, inbound_dir: Path) -> Path | None:
    """Where the host's file is for this runner: `/workspace/inbound/inbox/…` under inbound_dir
    (the same place in a container; elsewhere when run outside one). None for anything not
    plainly inside inbox/."""
    from .session_schema import SANDBOX_INBOUND_DIR
    path = PurePosixPath(str(sandbox_path or ""))
    try:
        rest = path.relative_to(f"{SANDBOX_INBOUND_DIR}/inbox")
    except ValueError:
        return None
    if not rest.parts or any(part in ("", ".", "..") for part in rest.parts):
        return None
    return Path(inbound_dir) / "inbox" / Path(*rest.parts)


class Shown:
    """The blocks of one turn: each image or PDF a message carries, in order, and the note its
    attachment line gets ("shown as image 1", or why not)."""

    def __init__(self, inbound_dir: Path, read_image=None, read_pdf=None):
        self.inbound_dir = Path(inbound_dir)
        self.blocks: list[dict] = []
        self.images = 0
        self.documents = 0
        self.size = 0
        self.read_image = read_image or image_block
        self.read_pdf = read_pdf or pdf_block

    def note(self, attachment) -> str | None:
        """Add the attachment's block when it is a picture or a PDF; the note for its line."""
        if not isinstance(attachment, dict) or attachment.get("error") or not attachment.get("path"):
            return None
        picture, pdf = is_image(attachment), is_pdf(attachment)
        if not (picture or pdf):
            return None
        if picture and self.images >= MAX_IMAGES:
            return f"not shown to you: more than {MAX_IMAGES} pictures in one turn; open the file to see it"
        where = local_path(attachment["path"], self.inbound_dir)
        if where is None:
            return None
        block, why = (self.read_image if picture else self.read_pdf)(str(where))
        if block is None:
            return f"not shown to you: {why}"
        size = len(block["source"]["data"])
        if self.size + size > MAX_TURN_BYTES:
            return "not shown to you: this turn carries as much as the model takes; open the file to see it"
        self.size += size
        self.blocks.append(block)
        if picture:
            self.images += 1
            return f"shown to you as image {self.images} below"
        self.documents += 1
        return f"shown to you as document {self.documents} below"
