"""Sixteen sandboxes pushing at once, in a process of their own (as sandboxes are), for
test_gate.py: reads {"url", "ca", "pushes": [[token, "honest" | "hostile"], ...]} on stdin, prints
each push's status (0: the door closed the connection before answering: the runner tries again)."""
from __future__ import annotations

import json
import sys
import threading

from agent_runner.door_link import DoorLink

from nanoclaw.remote import mirror
from tests.remote.test_mirror import row


def bodies() -> dict[str, bytes]:
    fill = "words, [and] more " * ((2 << 20) // 18)
    return {"hostile": b'{"acks_gone":[' + b",".join([b'"ab"'] * ((mirror.MAX_PUSH - 20) // 5)) + b"]}",
            "honest": json.dumps({"out": [row(n, content=fill) for n in range(1, 5)]}).encode()}


def main() -> None:
    ask = json.load(sys.stdin)
    made, statuses, go = bodies(), {}, threading.Event()

    def push(i, token, kind):
        client = DoorLink(ask["url"], token, ask["ca"]).session()
        go.wait(10)
        try:
            statuses[i] = client.request("POST", "/outbound", made[kind], timeout=120)[0]
        except OSError:
            statuses[i] = 0

    threads = [threading.Thread(target=push, args=(i, *p)) for i, p in enumerate(ask["pushes"])]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    print(json.dumps([statuses[i] for i in range(len(threads))]))


if __name__ == "__main__":
    main()
