"""What an agent's model chain costs a call at the door (issue 41).

    .venv/bin/python -m bench.model_failover [CALLS]

The door in this process (the proxy's own code on its unix socket, the real central database for
usage), two fake Messages APIs as upstreams. Legs alternate, CALLS each (default 200), streamed calls
of one short answer:

- no chain: an agent without a model of its own (today's path);
- chain: an agent with a model and a fallback, its primary answering (the model check, the chain's
  lookup and the reservation price on every call);
- failover: the same agent while its primary answers 529 at once (the door's second try).

Printed: p50 and p99 of each and the differences. Goals: the model check <= 1 ms; a failover costs
about one more round trip to the fallback.
"""
from __future__ import annotations

import http.client
import json
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from nanoclaw.app import create_app
from nanoclaw.config import Settings
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AgentGroup
from nanoclaw.operator import models as ops
from nanoclaw.proxy import ProxyServer
from tests.fakes.model_api import FakeModel, Reply


class Unix(http.client.HTTPConnection):
    def __init__(self, path: Path):
        super().__init__("localhost", timeout=30)
        self.path = str(path)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


BODY = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 50, "stream": True,
                   "messages": [{"role": "user", "content": "hi " * 2000}]}).encode()


def one(conn: Unix) -> float:
    started = time.perf_counter()
    conn.request("POST", "/v1/messages?beta=true", body=BODY, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    assert resp.status == 200, resp.status
    return time.perf_counter() - started


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-failover-"))
    with FakeModel(script=lambda r: Reply.say("ok", model=r.body["model"])) as primary, \
            FakeModel(script=lambda r: Reply.say("ok", model=r.body["model"])) as backup:
        primary.compress = backup.compress = None
        settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp / "data"), "NANOCLAW_GROUPS_DIR": str(tmp / "g"),
                                          "TZ": "UTC", "DATABASE_URL": f"sqlite:///{tmp / 'nc.db'}"},
                                 dotenv_path=tmp / "none.env")
        settings = replace(settings, anthropic_upstream_url=primary.url, anthropic_api_key="sk-ant-bench")
        app = create_app(settings)
        database.connect(reuse_if_open=True)
        apply_pending(database.obj, log=lambda _l: None)
        runner = app.test_cli_runner()
        for name in ("Plain", "Chained"):
            runner.invoke(args=["nanoclaw", "agent", "create", name])
        ops.add_upstream(settings, "cli", "backup", backup.url, "none", None, "default")
        ops.set_model(settings, "cli", AgentGroup.get(AgentGroup.folder == "chained"), "claude-sonnet-4-5", None,
                      ["backup:claude-haiku-4-5"])
        database.close()
        proxy = ProxyServer(settings, lambda: ["plain", "chained"], rescan_interval=0.5).start()
        try:
            conns = {f: Unix(proxy.proxy_dir / f / "proxy.sock") for f in ("plain", "chained")}
            for _ in range(20):
                one(conns["plain"]), one(conns["chained"])
            legs: dict[str, list[float]] = {"no chain": [], "chain": [], "failover": []}
            for i in range(calls):
                legs["no chain"].append(one(conns["plain"]))
                legs["chain"].append(one(conns["chained"]))
                primary.script = lambda r: Reply.error(529, "Overloaded")
                proxy.model_api.breaker.success("anthropic")  # measure the second try, not the breaker's skip
                legs["failover"].append(one(conns["chained"]))
                primary.script = lambda r: Reply.say("ok", model=r.body["model"])
        finally:
            proxy.stop()
    print(f"A streamed call through the door ({calls} each, a {len(BODY) // 1024} KiB request), two fake upstreams")
    for name, values in legs.items():
        print(f"  {name:9s} p50 {pct(values, .5) * 1000:6.2f} ms  p99 {pct(values, .99) * 1000:6.2f} ms  "
              f"mean {statistics.mean(values) * 1000:6.2f} ms")
    base = pct(legs["no chain"], .5)
    print(f"the model check and chain lookup: {(pct(legs['chain'], .5) - base) * 1000:+.2f} ms at the p50 (goal <= 1 ms)")
    print(f"a failover (primary 529 at once, then the fallback): {(pct(legs['failover'], .5) - base) * 1000:+.2f} ms "
          "at the p50")


if __name__ == "__main__":
    main()
