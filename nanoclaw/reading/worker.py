"""The reading worker: `python -m nanoclaw.reading.worker`, started by the web program on first use.

One JSON object a line on stdin, one answer a line on stdout, by id, several at once (a thread each,
at most WORKERS). A read: {"id", "url", "offset", "limit", "allow_networks", "allow_ports",
"own_ports"}, answered {"id", "ok": true, "url" (final), "status", "content_type", "bytes", "stopped",
"fetched_at", "title", "text" (characters offset..offset+limit), "total"}. A search: {"id", "kind":
"search", "provider", "search_url", "query", "count"} (search.py), answered {"id", "ok": true,
"text", "results"}. A refusal: {"id", "ok": false, "reason"}. The host's secrets are read here, from the environment and .env, never sent. The
worker exits when stdin closes or after `--idle` seconds with nothing to do, so the fetching and
extraction libraries hold no memory while nobody reads.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..internet.addresses import Refused, Rules, parse_networks
from ..internet.fetch import Fetcher
from ..proxy.host_secrets import HostSecrets

WORKERS = 4
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASS|CREDENTIAL)S?$|^DATABASE_URL$", re.IGNORECASE)


def host_secrets() -> list[str]:
    """Values the host keeps secret: variables named like secrets, and everything in .env."""
    return [v for k, v in os.environ.items() if SECRET_NAME.search(k) and v] + HostSecrets().values()


def searched(request: dict) -> dict:
    from .search import KEYS, SearchFailed, render, search
    provider = str(request.get("provider") or "")
    try:
        results = search(provider, request.get("search_url"), HostSecrets()(KEYS[provider]) if provider in KEYS else None,
                         str(request.get("query") or ""), max(1, min(int(request.get("count") or 10), 20)))
    except SearchFailed as exc:
        return {"ok": False, "reason": str(exc)}
    return {"ok": True, "text": render(results), "results": len(results)}


def answer(request: dict, secrets: list[str]) -> dict:
    if request.get("kind") == "search":
        return searched(request)
    from .extract import readable
    rules = Rules(allow_networks=parse_networks(" ".join(request.get("allow_networks") or ())),
                  allow_ports=frozenset(int(p) for p in request.get("allow_ports") or ()),
                  own_ports=frozenset(int(p) for p in request.get("own_ports") or ()))
    fetcher = Fetcher(rules, secrets=lambda: secrets)
    try:
        page = fetcher.get(str(request.get("url") or ""))
        title, text = readable(page.content_type, page.body, page.charset, page.url)
    except Refused as exc:
        return {"ok": False, "reason": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a page that breaks the extractor is a refusal, not a dead worker
        return {"ok": False, "reason": f"the page could not be read as text ({type(exc).__name__})"}
    offset = max(0, int(request.get("offset") or 0))
    limit = max(1, int(request.get("limit") or 50_000))
    return {"ok": True, "url": page.url, "status": page.status, "content_type": page.content_type,
            "bytes": len(page.body), "stopped": page.stopped, "fetched_at": page.fetched_at.isoformat(timespec="seconds"),
            "title": title, "text": text[offset:offset + limit], "offset": offset, "total": len(text)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=float, default=300.0, help="exit after this many seconds with nothing to do")
    args = ap.parse_args()
    secrets = host_secrets()
    out_lock, busy = threading.Lock(), [0]
    last = [time.monotonic()]

    def run(request: dict) -> None:
        try:
            result = answer(request, secrets)
        finally:
            with out_lock:
                busy[0] -= 1
                last[0] = time.monotonic()
        with out_lock:
            sys.stdout.write(json.dumps({"id": request.get("id"), **result}) + "\n")
            sys.stdout.flush()

    pending = b""
    with ThreadPoolExecutor(WORKERS, thread_name_prefix="read") as pool:
        while True:
            ready, _, _ = select.select([0], [], [], max(0.5, args.idle - (time.monotonic() - last[0])))
            if not ready:
                with out_lock:
                    if busy[0] == 0 and time.monotonic() - last[0] >= args.idle:
                        return
                continue
            chunk = os.read(0, 65536)  # raw: a buffered reader would hide lines select cannot see
            if not chunk:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                try:
                    request = json.loads(line)
                except ValueError:
                    continue
                with out_lock:
                    busy[0] += 1
                pool.submit(run, request)


if __name__ == "__main__":
    main()
