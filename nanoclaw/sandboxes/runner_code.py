"""The runner's bytecode, written on the host beside its source.

A sandbox mounts container/agent_runner read-only, so the runner's Python cannot cache what it
compiles there: without this every sandbox start compiles the runner's modules again (~25 ms of
CPU of a cold start on a 2-core VM). The host writes the cache once per process that starts
sandboxes; a file already current is left alone, and a tree the host cannot write is only logged.
"""
from __future__ import annotations

import compileall
import logging
from pathlib import Path

log = logging.getLogger("nanoclaw.sandboxes")


def compile_runner(directory: Path) -> bool:
    """Write the bytecode of every module under `directory` whose cache is missing or stale."""
    try:
        done = compileall.compile_dir(str(directory), quiet=2, workers=1)
    except OSError as exc:
        done = False
        log.debug("runner bytecode: %s", exc)
    if not done:
        log.info("could not write the runner's bytecode under %s; sandboxes compile it at each start", directory)
    return bool(done)
