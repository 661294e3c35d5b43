"""The docs and the code's own prose say only what is there: every path they quote in the
project's own folders (nanoclaw/…, tests/…, docs/…) exists. A path of a file that was moved or
renamed fails here until the text that quotes it is fixed."""
from __future__ import annotations

import re

from nanoclaw.config import PROJECT_ROOT

FOLDERS = ("nanoclaw", "tests", "container", "bench", "docs", "scripts", "deploy", "migrations")
QUOTED = re.compile(rf"(?<![\w/.$-])((?:{'|'.join(FOLDERS)})/[\w./<>*-]*[\w>*/])")


def texts():
    """Every doc and source file of the project (this test's own examples left out)."""
    files = [PROJECT_ROOT / "README.md", *(PROJECT_ROOT / "docs").rglob("*.md")]
    for folder in ("nanoclaw", "tests", "container", "bench"):
        files += (PROJECT_ROOT / folder).rglob("*.py")
    return [f for f in files if "__pycache__" not in f.parts and f.name != "test_docs.py"]


def missing(text: str) -> list[str]:
    """Quoted project paths (a file, a folder, a module's attribute, a test) that do not exist."""
    gone = []
    for quoted in QUOTED.findall(text):
        pattern = re.sub(r"<[^>]+>|\*", "*", quoted.rstrip("/.,"))
        candidates = [pattern, pattern + ".py"]
        head, _, attr = pattern.rpartition(".")
        if attr.isidentifier() and attr != "py":
            candidates.append(head + ".py")  # nanoclaw/outbound/delivery.outbox_copy
        if not any(next(PROJECT_ROOT.glob(c), None) for c in candidates):
            gone.append(quoted)
    return gone


def test_every_quoted_path_exists():
    found = {str(f.relative_to(PROJECT_ROOT)): gone for f in texts() if (gone := missing(f.read_text()))}
    assert found == {}


def test_the_checker_notices_a_path_that_is_not_there():
    assert missing("see nanoclaw/intake.py and `nanoclaw/inbound/intake.py`") == ["nanoclaw/intake.py"]
    assert missing("`nanoclaw/platforms/<name>/adapter.py`, tests/test_layout.py::test_x") == []
    assert missing("(nanoclaw/outbound/delivery.outbox_copy)") == []


def test_no_doc_points_at_a_design_file_the_repo_does_not_have():
    quoting = [str(f.relative_to(PROJECT_ROOT)) for f in texts() if "DESIGN.md" in f.read_text()]
    assert quoting == [] or (PROJECT_ROOT / "DESIGN.md").exists(), quoting
