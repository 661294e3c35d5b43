"""Request bodies on the session channel's event loop: the budget all connections share for the
bodies they hold in memory, and the stream a worker thread reads an upload from."""
from __future__ import annotations

import asyncio
import time

BODIES_IN_FLIGHT = 64 << 20   # request bodies held in memory at once, all connections together
BODY_WAIT_S = 30.0            # how long a request waits for that room before a 503
READ_WAIT_S = 60.0            # how long a worker waits for the next piece of an upload


class BodyRoom:
    """How many request body bytes the channel holds in memory at once: a request takes its length
    before reading and gives it back when done, so concurrent large bodies wait (or get a 503) rather
    than add up past what the door's process may use. Used on the channel's loop only."""

    def __init__(self, total: int = BODIES_IN_FLIGHT):
        self.total, self.used = total, 0
        self._freed: asyncio.Event | None = None

    async def take(self, size: int, timeout: float = BODY_WAIT_S) -> bool:
        deadline = time.monotonic() + timeout
        while self.used + size > self.total:
            self._freed = self._freed or asyncio.Event()
            try:
                await asyncio.wait_for(self._freed.wait(), deadline - time.monotonic())
            except (TimeoutError, ValueError):
                return False
            self._freed = None
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size
        if self._freed is not None:
            self._freed.set()


class LoopBody:
    """A request body as a stream a pool thread reads (tarfile reads in blocks): each read is done
    on the loop, and the stream ends at Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, size: int, loop: asyncio.AbstractEventLoop):
        self.reader, self.left, self.loop = reader, size, loop

    def read(self, n: int = -1) -> bytes:
        """n bytes (fewer only at the body's end), as a file's read gives them."""
        n = self.left if n is None or n < 0 else min(n, self.left)
        chunks = []
        while n > 0:
            step = min(n, 1 << 20)
            try:
                chunks.append(asyncio.run_coroutine_threadsafe(self.reader.readexactly(step), self.loop).result(READ_WAIT_S))
            except asyncio.IncompleteReadError as exc:
                raise ConnectionError("the body ended early") from exc
            n -= step
            self.left -= step
        return b"".join(chunks)

    def drain(self) -> None:
        try:
            while self.read(1 << 20):
                pass
        except (ConnectionError, TimeoutError):
            pass
