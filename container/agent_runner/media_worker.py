"""Decode one image and scale it for the model, in a process of its own (agent_runner/media.py).

`python -m agent_runner.media_worker --memory BYTES PATH` prints {"media_type": …, "data": base64} or {"error": …}
on stdout; `… --pdf PATH` prints {"pages": n} (pypdf reads the cross-reference streams and object
streams a simple scan of the bytes misses) or {"error": …}. Its memory is capped and the pixel count checked before decoding, so a decompression
bomb or a decoder fault ends this process, never the runner.
"""
from __future__ import annotations

import base64
import io
import json
import resource
import sys

from .media import LONG_EDGE, MAX_IMAGE_BYTES, MAX_PIXELS


def scaled(data: bytes) -> tuple[str, bytes]:
    from PIL import Image, ImageOps
    try:
        from pillow_heif import register_heif_opener
        register_heif_opener()
    except ImportError:  # HEIC then stays unreadable, and says so
        pass
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise ValueError(f"it has {width}x{height} pixels, more than the {MAX_PIXELS // 1_000_000} million "
                             "a picture may have here")
        image.seek(0)  # an animation: its first frame
        scale = min(1.0, LONG_EDGE / max(width, height))
        # a JPEG decodes at 1/2, 1/4 or 1/8 of its size when that is still at least what is kept:
        # a phone's 12-megapixel photo then costs a quarter of the work
        image.draft("RGB", (max(1, int(width * scale)), max(1, int(height * scale))))
        picture = ImageOps.exif_transpose(image)
        picture.thumbnail((LONG_EDGE, LONG_EDGE))  # only ever smaller, the whole picture kept
        alpha = picture.mode in ("RGBA", "LA") or (picture.mode == "P" and "transparency" in picture.info)
        if alpha or image.format in ("PNG", "GIF", "BMP"):  # drawn, not photographed: keep it lossless
            out = io.BytesIO()
            picture.convert("RGBA" if alpha else picture.mode if picture.mode in ("L", "RGB") else "RGB").save(out, "PNG")
            if out.tell() <= MAX_IMAGE_BYTES:
                return "image/png", out.getvalue()
            background = Image.new("RGB", picture.size, "white")
            background.paste(picture.convert("RGBA"), mask=picture.convert("RGBA").getchannel("A"))
            picture = background
        for quality in (85, 70, 50):
            out = io.BytesIO()
            picture.convert("RGB").save(out, "JPEG", quality=quality)
            if out.tell() <= MAX_IMAGE_BYTES:
                return "image/jpeg", out.getvalue()
    raise ValueError("it stays too large for the model even scaled down")


def pages(path: str) -> int:
    import logging

    from pypdf import PdfReader
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # warnings about a sloppy file are not answers
    reader = PdfReader(path, strict=False)
    if reader.is_encrypted:
        raise ValueError("it is encrypted")
    return len(reader.pages)


def reason(exc: BaseException, what: str = "an image") -> str:
    """Why the picture was not shown, in a line the agent may pass on."""
    if isinstance(exc, MemoryError):
        return f"it needs more memory to read than {what} may take here"
    if type(exc).__name__ == "DecompressionBombError":  # Pillow's own check, at twice MAX_PIXELS
        return f"it has more pixels than the {MAX_PIXELS // 1_000_000} million a picture may have here"
    if isinstance(exc, ValueError) and str(exc).startswith("it "):
        return str(exc)
    return f"it could not be read as {what} ({type(exc).__name__})"


def main(args: list[str]) -> int:
    if len(args) < 3 or args[0] != "--memory" or not args[1].isdigit():
        print(json.dumps({"error": "usage: media_worker --memory BYTES [--pdf] PATH"}))
        return 2
    memory, args = int(args[1]), args[2:]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))  # what media.py gives it: WORKER_MEMORY
    path = args[-1]
    if args[0] == "--pdf":
        try:
            count = pages(path)
        except Exception as exc:  # noqa: BLE001 - a hostile or broken PDF: one line says why
            print(json.dumps({"error": reason(exc, "a PDF")}))
            return 1
        print(json.dumps({"pages": count}))
        return 0
    try:
        with open(path, "rb") as fh:
            data = fh.read(64 * 1024 * 1024)
        media_type, encoded = scaled(data)
    except Exception as exc:  # noqa: BLE001 - whatever the file is, one line says why it was not shown
        print(json.dumps({"error": reason(exc)}))
        return 1
    print(json.dumps({"media_type": media_type, "data": base64.b64encode(encoded).decode()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
