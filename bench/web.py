"""What reading a page costs: the host's fetch and extraction, and a web_read from the model's call to its result.

    .venv/bin/python -m bench.web [N] [--runtime bwrap|docker]     (N reads a leg, default 30)

A test web host on 127.0.0.2 (opened as a home network is: NANOCLAW_WEB_ALLOW_NETWORKS) serves a
200 KB article: navigation, a sidebar, forty paragraphs, comments, a footer.
1. The host's side, in this process: `reading/worker.answer` (the address check, the pinned fetch,
   trafilatura's main text) N times, beside a bare GET of the same page (http.client, no checks, no
   extraction) interleaved with it: p50 of each, and their difference. Issue 62's goal: ≤ 150 ms.
2. Through the service as `make run` starts it, one agent, a warm sandbox: the fake model asks for
   `web_read` of the article; the figure is the model's tool call answered → the request carrying
   the tool's result arriving at the fake model (the CLI, the runner, the op, the worker, the answer
   back). Beside it, interleaved, the same for `list_tasks`, a host op that reads nothing: the
   difference is the read. Goal: ≤ 300 ms. At most 24 reads here: a session may read 30 a minute.
3. The browser (issue 62, item 4), asked as the web program asks it (the browser worker over its
   pipe, Chromium in its sandbox: bubblewrap, or a container with --runtime docker): the first open
   (the sandbox and Chromium starting), then N opens of the same article and N snapshots, p50 each,
   and the memory of the worker with one browser open (the PSS of every process it started, and
   every process in the sandbox), beside leg 1's read of the same page.
"""
from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from fakes.model_api import FakeModel, Reply  # noqa: E402
from fakes.telegram_api import FakeTelegram  # noqa: E402
from idle import PEOPLE, SECRET, three_people_service  # noqa: E402
from service_harness import post  # noqa: E402

from nanoclaw.reading.ops import READS_PER_MINUTE  # noqa: E402  (the service leg stays under the session's limit)


def article() -> bytes:
    words = ("tea leaves water temperature minutes steep bitter sweet aroma cup kettle grams garden harvest spring "
             "shade roast green oolong black brew").split()
    paragraphs = "".join(f"<p>{' '.join(words[(i * 7 + j) % len(words)] for j in range(160))}.</p>" for i in range(130))
    nav = "".join(f"<li><a href='/section/{i}'>Section {i}</a></li>" for i in range(60))
    side = "".join(f"<div class='ad'>Buy product {i} now, limited offer</div>" for i in range(40))
    comments = "".join(f"<div class='comment'><b>reader{i}</b> great article, thanks {i}</div>" for i in range(400))
    page = (f"<html><head><title>All about tea</title><style>{'.x{color:red}' * 2000}</style></head><body>"
            f"<nav><ul>{nav}</ul></nav><aside>{side}</aside><article><h1>All about tea</h1>{paragraphs}</article>"
            f"<section class='comments'>{comments}</section><footer>Copyright, privacy, imprint</footer></body></html>")
    return page.encode()


PAGE = article()


class Site(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    return f"p50 {statistics.median(ordered) * 1000:6.1f} ms  p90 {ordered[int(len(ordered) * 0.9) - 1] * 1000:6.1f} ms"


def host_side(port: int, n: int) -> None:
    from nanoclaw.reading.worker import answer
    request = {"url": f"http://127.0.0.2:{port}/article", "allow_networks": ["127.0.0.2/32"], "allow_ports": [port],
               "limit": 50_000}
    answer(request, [])  # imports and the first page's caches, as a worker's first read pays once
    reads, bare = [], []
    for _ in range(n):
        started = time.perf_counter()
        got = answer(request, [])
        reads.append(time.perf_counter() - started)
        assert got["ok"] and "Buy product" not in got["text"], got.get("reason")
        started = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.2", port, timeout=10)
        conn.request("GET", "/article")
        conn.getresponse().read()
        conn.close()
        bare.append(time.perf_counter() - started)
    print(f"\nthe host's side, {n} reads of a {len(PAGE) / 1024:.0f} KB article ({got['total']:,} characters of text kept):")
    print(f"  web_read (check, fetch, extract)  {ms(reads)}")
    print(f"  bare GET (no check, no extraction) {ms(bare)}")
    print(f"  the read's own work: {(statistics.median(reads) - statistics.median(bare)) * 1000:.1f} ms at the p50 "
          "(goal: the whole read ≤ 150 ms)")


def _tree_pss_mib(pid: int) -> float:
    """The PSS of a process and all its descendants (shared pages counted once across them; a
    container's processes are the engine's children, not ours: with docker this leaves Chromium out,
    and says so)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        here = todo.pop()
        todo += children.get(here, [])
        try:
            total += int(next(line for line in Path(f"/proc/{here}/smaps_rollup").read_text().splitlines()
                              if line.startswith("Pss:")).split()[1])
        except (OSError, StopIteration):
            pass
    return total / 1024


def browser_side(port: int, n: int, runtime: str) -> None:
    import subprocess

    from nanoclaw.config import Settings
    from nanoclaw.reading.browser_sandbox import where
    sandbox = where(Settings.load({**__import__("os").environ, "NANOCLAW_RUNTIME": runtime}))
    if isinstance(sandbox, str) or (runtime == "docker") != (sandbox.kind == "docker"):
        print(f"\nthe browser: skipped ({sandbox if isinstance(sandbox, str) else 'it would run in ' + sandbox.kind})")
        return
    worker = subprocess.Popen([sys.executable, "-m", "nanoclaw.reading.browser", "--idle", "60", *sandbox.worker_args()],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ids = iter(range(1, 10**6))

    def ask(**request) -> tuple[dict, float]:
        started, request_id = time.perf_counter(), next(ids)
        worker.stdin.write(json.dumps({"id": request_id, "session": "bench:s", "allow_networks": ["127.0.0.2/32"],
                                       "allow_ports": [port], **request}) + "\n")
        worker.stdin.flush()
        while True:
            got = json.loads(worker.stdout.readline())
            if got.get("id") == request_id:
                assert got["ok"], got.get("reason")
                return got, time.perf_counter() - started

    url = f"http://127.0.0.2:{port}/article"
    try:
        _, first = ask(op="open", url=url)
        pss = _tree_pss_mib(worker.pid)
        opens, snaps = [], []
        for _ in range(n):
            opens.append(ask(op="open", url=url)[1])
            snaps.append(ask(op="snapshot")[1])
    finally:
        worker.stdin.close()
        worker.wait(60)
    print(f"\nthe browser ({sandbox.kind} sandbox), the same article, asked as the web program asks:")
    print(f"  first open (sandbox and Chromium start) {first * 1000:6.0f} ms")
    print(f"  open again                {ms(opens)}")
    print(f"  snapshot                  {ms(snaps)}")
    print(f"  memory with one browser open: {pss:.0f} MiB PSS (the worker and its processes"
          + (", not the container's" if sandbox.kind == "docker" else ", Chromium's included") + ")")


def through_the_service(port: int, n: int, runtime: str) -> None:
    url = f"http://127.0.0.2:{port}/article"

    def brain(req):
        prompt, done = req.current_prompt(), req.turn_tool_results()
        if done:
            return Reply.say("done")
        if "read it" in prompt:
            return Reply.call("mcp__nanoclaw__web_read", url=url)
        if "list them" in prompt:
            return Reply.call("mcp__nanoclaw__list_tasks")
        return Reply.say("ok")
    with tempfile.TemporaryDirectory(prefix="nanoclaw-web-") as tmp, FakeModel(script=brain) as model, \
            FakeTelegram() as tg:
        import os
        os.environ.update(NANOCLAW_WEB_ALLOW_NETWORKS="127.0.0.2/32", NANOCLAW_WEB_ALLOW_PORTS=str(port))
        svc = three_people_service(Path(tmp), runtime, model, tg)
        person = PEOPLE[0]
        legs: dict[str, list[float]] = {"read it": [], "list them": []}
        try:
            for i in range(n * 2 + 2):
                words = "read it" if i % 2 == 0 else "list them"
                before = len(model.model_calls())
                update = {"update_id": 970000000 + i, "message": {
                    "message_id": 500 + i, "from": {"id": person, "is_bot": False, "first_name": "P"},
                    "chat": {"id": person, "type": "private", "first_name": "P"}, "date": int(time.time()),
                    "text": f"{words} ({i})"}}
                sent = len(tg.calls("sendMessage"))
                post(svc.port, "/webhooks/telegram", json.dumps(update).encode(),
                     {"X-Telegram-Bot-Api-Secret-Token": SECRET})
                deadline = time.monotonic() + 120
                while len(tg.calls("sendMessage")) <= sent:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"turn {i} was not answered; see {svc.log_path}")
                    time.sleep(0.02)
                calls = model.model_calls()[before:]
                asked = next(c for c in calls if c.reply is not None and c.reply.tool_calls)
                answered = next(c for c in calls if c.turn_tool_results())
                if i >= 2:  # the first of each warms the sandbox, the worker and the CLI
                    legs[words].append(answered.received_mono - (asked.received_mono + (asked.handled_s or 0)))
                result = answered.turn_tool_results()[-1].text
                assert (words != "read it") or "UNTRUSTED DATA" in result, result[:300]
        finally:
            svc.stop()
    print(f"\nthrough the service ({runtime}, warm), the model's tool call answered → its result at the model, {n} each:")
    print(f"  web_read of the article   {ms(legs['read it'])}")
    print(f"  list_tasks (a host op)    {ms(legs['list them'])}")
    print(f"  the read's share: {(statistics.median(legs['read it']) - statistics.median(legs['list them'])) * 1000:.1f} "
          "ms at the p50 (goal: the whole call ≤ 300 ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=30)
    ap.add_argument("--runtime", choices=("bwrap", "docker"), default="bwrap")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.2", 0), Site)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        host_side(port, args.n)
        through_the_service(port, min(args.n, READS_PER_MINUTE - 6), args.runtime)
        browser_side(port, args.n, args.runtime)
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
