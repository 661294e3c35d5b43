"""Browser sandboxes alive now, as the tests count them: the relay each runs beside its Chromium (one a
sandbox), only those started under a given process (tests beside may run browsers of their own), and
on Docker the containers labelled as browsers."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def relays_under(root: int | None = None) -> int:
    """Relays (`python3 /opt/relay.py`, the first program of a bubblewrap browser sandbox) descending from `root`
    (this process by default)."""
    root = root or os.getpid()
    found = 0
    for pid in subprocess.run(["pgrep", "-f", "^[^ ]*python3 /opt/relay.py"], capture_output=True,
                              text=True).stdout.split():
        here = int(pid)
        while here > 1 and here != root:
            here = _parent(here)
        found += here == root
    return found


def containers(engine: str) -> int:
    out = subprocess.run(["docker", "-H", engine, "ps", "-q", "--filter", "label=nanoclaw.browser=1"],
                         capture_output=True, text=True, timeout=30).stdout
    return len(out.split())
