"""What the long-running programs load at rest (issue 43; the figures are bench/footprint.py's).

Each check runs a fresh interpreter the way the program starts: gunicorn's master reads
gunicorn.conf.py and its logger class, the worker (forked from it) imports the app; the proxy
runs `python -m nanoclaw.proxy`'s imports.
"""
import json
import subprocess
import sys

from nanoclaw.config import PROJECT_ROOT

from conftest import postgres_server_url, require

MASTER_THEN_WORKER = """
import json, runpy, sys
conf = runpy.run_path("gunicorn.conf.py")
import nanoclaw.web.access_log
master = sorted(m for m in ("flask", "peewee", "nanoclaw.config") if m in sys.modules)
conf["post_fork"](None, None)
import warnings
with warnings.catch_warnings(record=True) as warned:
    import app
    import peewee
    import requests
print(json.dumps({"warned": [str(w.message) for w in warned], "master": master, "loaded": sorted(m for m in ("docker", "psycopg2", "nanoclaw.cli.doctor", "croniter",
                                                                 "charset_normalizer", "trafilatura", "lxml", "pypdf")
                                                   if sys.modules.get(m) is not None),
                  "postgres_driver": peewee.psycopg2 is not None}))
"""


def run(code: str, tmp_path, database_url: str | None = None) -> dict:
    env = {"NANOCLAW_DATA_DIR": str(tmp_path / "data"), "NANOCLAW_ENV_FILE": str(tmp_path / "none.env"),
           "NANOCLAW_PORT": "8080",  # as `make run` starts gunicorn (nanoclaw/supervise.py)
           "TZ": "UTC", "PATH": "/usr/bin:/bin", "NANOCLAW_RUNTIME": "bwrap"}
    if database_url:
        env["DATABASE_URL"] = database_url
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_web_program_on_sqlite_loads_neither_postgres_driver_nor_docker_sdk_nor_commands(tmp_path):
    """Nor requests' encoding detector (3 MiB): a text answer naming no charset is read as UTF-8."""
    seen = run(MASTER_THEN_WORKER, tmp_path)
    assert seen["master"] == [], "gunicorn's master has no use for Flask, peewee or the settings"
    assert seen["warned"] == []
    assert seen["loaded"] == []
    assert seen["postgres_driver"] is False


def test_every_platforms_webhook_is_read_without_pydantic(tmp_path):
    """The web program reads each platform's payloads through msgspec shapes: pydantic (6.7 MiB in
    the web program, bench/footprint.py) is never loaded by a webhook."""
    code = """
import json, sys
from pathlib import Path
from nanoclaw.channels import shapes
from nanoclaw.platforms.discord import schema as ds
from nanoclaw.platforms.matrix import schema as mx
from nanoclaw.platforms.signal import schema as sg
from nanoclaw.platforms.slack import schema as sl
from nanoclaw.platforms.telegram import schema as tg
from nanoclaw.platforms.whatsapp import schema as wa
read = 0
for folder, shape in (("telegram", tg.Update), ("slack", sl.Envelope), ("whatsapp", wa.Body), ("signal", sg.Handover),
                      ("matrix", mx.Handover), ("discord", ds.Interaction)):
    for path in sorted(Path("tests/fixtures", folder).glob("*.json")):
        try:
            shapes.read(shape, json.loads(path.read_text()))
            read += 1
        except shapes.ShapeError:
            pass
print(json.dumps({"read": read, "pydantic": "pydantic" in sys.modules}))
"""
    seen = run(code, tmp_path)
    assert seen["read"] >= 80 and seen["pydantic"] is False


def test_web_program_on_postgres_still_has_its_driver(tmp_path):
    url = postgres_server_url()
    require(url is not None, "no PostgreSQL server (set NANOCLAW_TEST_PG_URL or install postgresql)")
    seen = run(MASTER_THEN_WORKER, tmp_path, database_url=url)
    assert seen["postgres_driver"] is True


def test_proxy_program_on_sqlite_skips_the_postgres_driver(tmp_path):
    code = """
import json, sys
import nanoclaw.proxy
import nanoclaw.proxy.__main__ as program
nanoclaw.proxy.serve_forever = lambda *a, **k: None  # everything main() does but serve
program.main()
import peewee
print(json.dumps({"postgres_driver": peewee.psycopg2 is not None, "docker": sys.modules.get("docker") is not None}))
"""
    seen = run(code, tmp_path)
    assert seen == {"postgres_driver": False, "docker": False}


RUNNER_TOOLS = """
import asyncio, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, "container")
import agent_runner.__main__  # the runner's entry, as `python -m agent_runner` starts it (its main() not run)
from agent_runner import left_out
from agent_runner.config import RunnerConfig
from agent_runner.mcp_tools import ToolContext, Turn, build_server
from agent_runner.store import SessionStore
from agent_runner.targets import Target
from claude_agent_sdk._internal.sdk_mcp_bridge import SdkMcpBridge
from nanoclaw.sessions import session_schema as schema, store as host_store

folder = Path(tempfile.mkdtemp()) / "session"
host_store.prepare(folder, Target("cli", "owner-chat"))  # the session folder as the host lays it out
store = SessionStore.of_session(folder)
config = RunnerConfig.from_env({"NANOCLAW_SESSION_DIR": str(store.dir), "NANOCLAW_INBOUND_DIR": str(store.inbound_dir),
                                "TZ": "UTC"})
ctx = ToolContext(store=store, config=config, turn=Turn(reply_to=Target("cli", "owner-chat"), in_reply_to="m1"))
server = build_server(ctx)

async def serve():
    # What the bundled CLI sends the SDK for an in-process server (its mcp_message control requests,
    # seen from a real CLI: initialize at 2025-11-25, then tools/list and tools/call).
    bridge = SdkMcpBridge(server["name"], server["instance"])
    await bridge.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "2"}}})
    await bridge.handle({"jsonrpc": "2.0", "method": "notifications/initialized"})
    listed = await bridge.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    called = await bridge.handle({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {"name": "send_message", "arguments": {"text": "hello"}}})
    await bridge.aclose()
    return listed, called

listed, called = asyncio.run(serve())
import sqlite3
sent = [r[0] for r in sqlite3.connect(store.dir / schema.OUTBOUND).execute("SELECT content FROM messages_out")]
try:
    from mcp.server import Server
    Server("x")
    refused = None
except left_out.LeftOutError as e:
    refused = str(e)
print(json.dumps({"tools": [t["name"] for t in listed["result"]["tools"]], "called": called["result"], "sent": sent,
                  "refused": refused, "bridge": SdkMcpBridge.__module__,
                  "real": sorted(m for m in ("mcp", "mcp.types", "mcp_types", "pydantic", "starlette", "uvicorn",
                                             "httpx2", "jsonschema.validators")
                                 if m in sys.modules and not left_out.is_stand_in(sys.modules[m]))}))
"""


def test_the_runner_serves_its_tools_without_mcp(tmp_path):
    """The runner's cold start: the SDK's import of mcp brings its wire types (pydantic models of five
    protocol revisions), HTTP transports, auth and servers, and jsonschema: two thirds of the runner's
    imports, none of which its own tools server (agent_runner/tool_server.py) runs. They stay out (the
    argument check's jsonschema comes at the first call: loaded here after it), and the tools answer
    the CLI's requests through the SDK's control channel."""
    seen = run(RUNNER_TOOLS, tmp_path)
    assert seen["real"] == ["jsonschema.validators"], "loaded for nothing at every sandbox start"
    assert seen["bridge"] == "agent_runner.tool_server"
    assert "send_message" in seen["tools"] and "schedule_task" in seen["tools"]
    assert seen["called"]["isError"] is False and "message_id 1" in seen["called"]["content"][0]["text"]
    assert [json.loads(c)["text"] for c in seen["sent"]] == ["hello"]
    assert "mcp.server.Server is left out" in seen["refused"], "a path that needs one fails loudly"
