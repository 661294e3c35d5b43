"""Sending a reply that was split into several platform messages, resumable after a failure.

Delivery retries a whole outbound row; without this, a 429 on part 3 of 5 would send parts
1 and 2 again on the retry. The parts already sent are remembered (in memory, per adapter)
under the row's (target, text), so the retry sends only what is missing.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable


class PartialSends:
    def __init__(self, keep: int = 100):
        self._sent: OrderedDict[Hashable, list[str]] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def send(self, key: Hashable, parts: list[str], send_one: Callable[[str], str]) -> str | None:
        """Send the parts not sent yet under `key`; the first part's message id (None for no parts).
        An exception from send_one propagates after the progress so far is remembered."""
        with self._lock:
            sent = self._sent.pop(key, [])
        try:
            for part in parts[len(sent):]:
                sent.append(send_one(part))
        except BaseException:
            if sent:
                with self._lock:
                    self._sent[key] = sent
                    while len(self._sent) > self._keep:
                        self._sent.popitem(last=False)
            raise
        return sent[0] if sent else None
