"""A fetched page as text the model reads: its main content as Markdown, and its title.

Runs in the worker program only (trafilatura, lxml and pypdf stay out of the web and proxy programs).
HTML through trafilatura (`docs/decisions/2026-12-06-web-extraction.md` says why), without its
metadata pass (the date guesser alone is about 0.2 s a page); the title from the page's own <title>.
PDF through pypdf, text of at most MAX_PDF_PAGES pages, as the sandbox's reading of a sent PDF.
Feeds (RSS, Atom) as a list of their items; JSON pretty-printed; plain text as it is.
"""
from __future__ import annotations

import io
import json
import logging

MAX_PDF_PAGES = 100  # as container/agent_runner/media.py takes a PDF a person sends


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", errors="replace")


def _title(tree) -> str:
    if tree is None:
        return ""
    found = tree.find(".//title")
    return " ".join((found.text_content() if found is not None else "").split())[:300]


def html(body: bytes, url: str) -> tuple[str, str]:
    import lxml.html
    import trafilatura
    try:
        tree = lxml.html.fromstring(body)
    except (ValueError, lxml.etree.ParserError):
        return "", ""
    text = trafilatura.extract(tree, url=url, output_format="markdown", include_links=True, include_tables=True,
                               include_comments=False, with_metadata=False, favor_recall=True)
    if not text:  # no main part found (a list page, a form): the visible text instead
        text = " ".join(tree.text_content().split())
    return _title(tree), text


def pdf(body: bytes) -> tuple[str, str]:
    from pypdf import PdfReader
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    reader = PdfReader(io.BytesIO(body), strict=False)
    if reader.is_encrypted:
        raise ValueError("the PDF is encrypted")
    pages = [page.extract_text() or "" for page in reader.pages[:MAX_PDF_PAGES]]
    title = str((reader.metadata or {}).get("/Title") or "")[:300]
    more = (f"\n\n[the PDF has {len(reader.pages)} pages; the first {MAX_PDF_PAGES} are shown]"
            if len(reader.pages) > MAX_PDF_PAGES else "")
    return title, "\n\n".join(f"## Page {n}\n\n{text.strip()}" for n, text in enumerate(pages, 1)) + more


def feed(body: bytes) -> tuple[str, str]:
    from lxml import etree
    root = etree.fromstring(body, parser=etree.XMLParser(recover=True, resolve_entities=False, no_network=True))
    if root is None:
        return "", ""

    def text_of(node, *names):
        for name in names:
            found = node.find(name)
            if found is not None and (found.text or found.get("href")):
                return " ".join((found.text or found.get("href") or "").split())
        return ""
    atom = "{http://www.w3.org/2005/Atom}"
    items = root.findall(".//item") or root.findall(f".//{atom}entry")
    title = text_of(root.find("channel") if root.find("channel") is not None else root, "title", f"{atom}title")
    lines = []
    for n, item in enumerate(items, 1):
        lines.append(f"{n}. {text_of(item, 'title', f'{atom}title')} ({text_of(item, 'link', f'{atom}link')})")
        summary = text_of(item, "description", f"{atom}summary", f"{atom}content")
        if summary:
            lines.append(f"   {summary[:500]}")
    return title, "\n".join(lines) if lines else etree.tostring(root, method="text", encoding="unicode")


def readable(content_type: str, body: bytes, charset: str | None, url: str) -> tuple[str, str]:
    """(title, text) of a fetched body."""
    if content_type in ("text/html", "application/xhtml+xml"):
        return html(body, url)
    if content_type == "application/pdf":
        return pdf(body)
    if content_type in ("application/rss+xml", "application/atom+xml") or (
            content_type.endswith("xml") and (b"<rss" in body[:2000] or b"<feed" in body[:2000])):
        return feed(body)
    text = _decode(body, charset)
    if content_type == "application/json" or content_type.endswith("+json"):
        try:
            return "", json.dumps(json.loads(text), indent=1, ensure_ascii=False)
        except ValueError:
            return "", text
    return "", text
