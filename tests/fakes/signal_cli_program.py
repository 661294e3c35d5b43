"""A fake `signal-cli -a ACCOUNT -o json jsonRpc` program: line-delimited JSON-RPC on stdin and stdout
while it receives, as signal-cli 0.14.6 behaves (JsonRpcDispatcherCommand, SignalJsonRpcDispatcherHandler,
ReceiveHelper, JsonWriterImpl over App's System.out):

- requests on stdin are answered on stdout (the answers come from the FakeSignalCli object, which plays
  the daemon's API and Signal's servers); stdin's end makes it exit;
- receiving starts at once (receive mode on-start); each envelope from Signal's servers is first stored
  in the message cache (a file here, fsynced), then acknowledged to the server, then written to stdout
  as a `receive` notification, then deleted from the cache. At start the cache is handled first
  (retryFailedReceivedMessages), so an envelope stored but not handled when the program died is
  written again;
- stdout is a Java PrintStream: a write into a pipe nobody reads fails silently, so the envelope is
  deleted from the cache all the same (lost). Only the process's death (the listener's PDEATHSIG)
  stops it from taking more off the server.

Each envelope written is logged (`--log`, a JSON line: when, its timestamp), so a test can tell which
were written into the pipe just before the reader died. Run through a shim named `signal-cli`."""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import requests

_out = threading.Lock()


def emit(message: dict) -> None:
    line = json.dumps(message, separators=(",", ":")) + "\n"
    with _out:
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except (BrokenPipeError, OSError):
            pass  # PrintStream: the error is swallowed, the caller goes on


def answer_requests(server: str) -> None:
    http = requests.Session()
    for line in sys.stdin:
        try:
            request = json.loads(line)
        except ValueError:
            emit({"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": None})
            continue
        answer = http.post(f"{server}/api/v1/rpc", json=request, timeout=60).json()
        emit(answer)
    os._exit(0)  # stdin closed: signal-cli's reader ends and the program with it


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--cache", required=True, type=Path)
    parser.add_argument("--log", required=True, type=Path)
    ours, rest = parser.parse_known_args()
    if "jsonRpc" not in rest:
        print(f"this fake signal-cli only runs jsonRpc, not {rest}", file=sys.stderr)
        sys.exit(2)
    ours.cache.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=answer_requests, args=(ours.server,), daemon=True).start()
    http = requests.Session()
    log = ours.log.open("a")

    def handle(event: dict, cached: Path) -> None:
        log.write(json.dumps({"at": time.time(), "ts": event["envelope"].get("timestamp")}) + "\n")
        log.flush()
        emit({"jsonrpc": "2.0", "method": "receive", "params": event})
        cached.unlink(missing_ok=True)

    for cached in sorted(ours.cache.glob("*.json")):
        try:
            event = json.loads(cached.read_text())
        except ValueError:  # stored only in part (killed while storing): never acknowledged, so still on the
            cached.unlink()  # server; signal-cli deletes an envelope it cannot load (retryFailedReceivedMessage)
            continue
        handle(event, cached)
    n = int(time.time() * 1e6)
    while True:
        event = http.get(f"{ours.server}/signal-server/peek", timeout=30).json().get("event")
        if event is None:
            continue
        n += 1
        cached = ours.cache / f"{n:020d}.json"
        part = cached.with_suffix(".part")
        with open(part, "w") as f:
            f.write(json.dumps(event))
            f.flush()
            os.fsync(f.fileno())
        part.rename(cached)
        http.post(f"{ours.server}/signal-server/ack", json={"event": event}, timeout=30)
        handle(event, cached)


if __name__ == "__main__":
    main()
