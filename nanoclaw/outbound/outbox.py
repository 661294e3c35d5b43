"""Files the agent sends: a host-owned copy of a file in its outbox/, made without trusting the folder.

The agent controls outbox/, so whatever is there may be a link, a FIFO, a sparse or growing file:
the host never follows, blocks on, or copies more than the platform takes from it.
"""
from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..channels.base import DeliveryError
from ..security import UnsafePath, contained
from ..sessions.store import outbox_dir


def sent_name(outbox_name: str) -> str:
    """The name a person sees: the runner's outbox copy without the prefix that keeps copies apart
    (`69a0a488-chart.png` → `chart.png`)."""
    return re.sub(r"^[0-9a-f]{8}-(?=.)", "", outbox_name)


@contextmanager
def outbox_copy(session_path: Path, name, limit: int) -> Iterator[Path]:
    """A host-owned copy of a file in the agent's outbox/, for the adapter to send. The agent controls
    that folder, so the host never blocks on it and never copies more than the platform takes: the
    file is opened without following a link and without waiting (a FIFO would hold the open until a
    writer came), then `fstat` says what it is before a byte is read (a plain file, within `limit`:
    a sparse file's size counts, not its blocks), its real path is checked again on the descriptor
    (a link swapped in after the check cannot make the host send another file), and at most `limit`
    bytes are copied (one that grows meanwhile is refused)."""
    outbox = outbox_dir(session_path)
    try:
        real = contained(outbox, str(name).removeprefix("outbox/"))
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (UnsafePath, OSError, TypeError) as exc:
        raise DeliveryError(f"file refused: {exc}", permanent=True) from None
    try:
        st = os.fstat(fd)
        opened = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if outbox.resolve() not in opened.parents or not stat.S_ISREG(st.st_mode):
            raise DeliveryError(f"file refused: {name!r} is not a file in the outbox", permanent=True)
        if st.st_size > limit:
            raise DeliveryError(f"file refused: {real.name} is {st.st_size} bytes, more than this platform takes "
                                f"({limit})", permanent=True)
        with tempfile.TemporaryDirectory(prefix="nanoclaw-send-") as staging:
            copy = Path(staging) / sent_name(real.name)
            with open(copy, "wb") as dst:
                if _copy_at_most(fd, dst, limit) > limit:
                    raise DeliveryError(f"file refused: {real.name} grew past {limit} bytes while it was read",
                                        permanent=True)
            yield copy
    finally:
        os.close(fd)


def _copy_at_most(fd: int, dst, limit: int) -> int:
    """Copy from the descriptor's start; stops one byte past `limit` (the caller refuses that)."""
    copied = 0
    while copied <= limit:
        chunk = os.pread(fd, min(1 << 20, limit + 1 - copied), copied)
        if not chunk:
            break
        dst.write(chunk)
        copied += len(chunk)
    return copied
