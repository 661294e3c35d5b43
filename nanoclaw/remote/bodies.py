"""Request bodies on the session channel's event loop: the budget all connections share for the
bodies they hold in memory (and what parsing them builds), and the stream a worker thread reads an
upload from."""
from __future__ import annotations

import asyncio
import json
import re
import time

BODIES_IN_FLIGHT = 64 << 20   # request bodies held in memory at once, all connections together
BODY_WAIT_S = 30.0            # how long a request waits for that room before a 503
READ_WAIT_S = 60.0            # how long a worker waits for the next piece of an upload
# What parsing a JSON body builds is bounded by its values, not its bytes: a list of 3-byte strings
# builds 20 times its size, and a typed decoder checks a list's length only once it has built it.
# So a body's values are counted first (outside strings) and the room a body takes is its bytes and
# VALUE_COST for each value it may hold (a short string, its slot in a list, its share of a row's
# tuple: tests/remote/test_mirror.py measures it).
VALUE_COST = 96
BASE_COST = 16 << 10          # what decoding any body builds besides its values (the result's frame)
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[,\]}]')


def values_in(body: bytes, stop: int | None = None) -> int:
    """An upper bound on the JSON values in `body` (pure): each value but the top one is followed by
    a comma or is the last of its container; commas and brackets inside strings are not counted. The
    count stops once past `stop` (a body of a million values is not walked through)."""
    count = 1
    for token in _TOKENS.finditer(body):
        if token.end() - token.start() == 1:  # a string is at least its two quotes
            count += 1
            if stop is not None and count > stop:
                break
    return count


def room_for(length: int, max_values: int) -> int:
    """The memory a body of `length` bytes may take while it is parsed and served (pure)."""
    return length + BASE_COST + min(max_values, length // 2 + 1) * VALUE_COST


def parse_json(body: bytes, max_values: int):
    """The body's JSON (ValueError past `max_values` values or when it is not JSON)."""
    if values_in(body, max_values) > max_values:
        raise ValueError(f"a body of this request holds at most {max_values} values")
    return json.loads(body or b"{}")


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
            # every waiter waits on the one current event; only `give` replaces it, so none is left
            # waiting on an event nobody will set
            if self._freed is None:
                self._freed = asyncio.Event()
            freed = self._freed
            try:
                await asyncio.wait_for(freed.wait(), deadline - time.monotonic())
            except (TimeoutError, ValueError):
                return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size
        if self._freed is not None:
            self._freed.set()
            self._freed = None


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
