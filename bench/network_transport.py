"""Sessions over the network against sessions in shared folders, in one run (issue 33).

    .venv/bin/python -m bench.network_transport [N]     (N warm messages per leg, default 20)

Three set-ups, each the whole pipe of bench/latency.py (router → runner → real SDK + CLI → proxy
program → fake model → delivery), warm overhead = accepted → reply handed, minus the model's time:
  files    Docker on this machine, the session bind-mounted (today's default)
  network  Docker on this machine, no bind mount: the session through the door's TLS gate
  remote   Docker on a second engine in its own network namespace (scripts/remote-engine.sh),
           over TCP with TLS: another machine's view, with the session through the gate
files and network alternate in legs of N (files, network, files, network), so drift of this VM
falls on both; the ratio is network / files. Goal: at most 1.2x. Cold start = wake → first model
request, three per leg.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.latency import ROOT, measure, pct
from fakes.model_api import FakeModel, Reply
from service_harness import free_port
from nanoclaw.config import Settings
from nanoclaw.remote.access import DoorAccess
from nanoclaw.runtime import docker as docker_rt


def remote_engine() -> dict | None:
    script = ROOT / "scripts" / "remote-engine.sh"
    started = subprocess.run([str(script), "start"], capture_output=True, text=True)
    if started.returncode != 0:
        return None
    subprocess.run([str(script), "load", "nanoclaw-agent:latest"], check=True)
    return dict(line.split("=", 1) for line in started.stdout.split())


def leg(kind: str, tmp: Path, base_env: dict, n: int, engine: dict | None, number: int = 0) -> dict:
    port = free_port()
    env = {**base_env, "DATABASE_URL": f"sqlite:///{tmp / kind / 'nc.db'}", "NANOCLAW_DATA_DIR": str(tmp / kind),
           "NANOCLAW_ENV_FILE": str(tmp / "none")}
    if kind != "files":
        address = engine["NANOCLAW_TEST_DOOR_ADDRESS"] if kind == "remote" else "127.0.0.1"
        env |= {"NANOCLAW_DOOR_LISTEN": f"{address}:{port}", "NANOCLAW_SESSION_TRANSPORT": "network",
                "NANOCLAW_SANDBOX_NETWORK": "host"}
    settings = Settings.load(environ=env, dotenv_path=tmp / "none")
    if kind == "remote":
        saved = {k: os.environ.get(k) for k in ("DOCKER_HOST", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")}
        os.environ.update({k: engine[k] for k in saved})
        try:
            client = docker_rt.from_environment(120)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    else:
        client, _ = docker_rt.connect()
        client.api.timeout = 120
    door = None if kind == "files" else DoorAccess(settings)
    runtime = docker_rt.DockerRuntime(client, image=settings.agent_image, door=door, network="host")
    return measure(f"{kind}{number}-{os.getpid()}", runtime, settings, model_ref[0], n, {}, env)


model_ref: list = []


def show(name: str, warm: list, cold: list) -> None:
    print(f"{name:8s} warm p50 {pct(warm, .5) * 1000:6.0f} ms  p95 {pct(warm, .95) * 1000:6.0f} ms  "
          f"mean {statistics.mean(warm) * 1000:6.0f} ms  ({len(warm)} turns);  cold start p50 {pct(cold, .5):5.2f} s  "
          f"max {max(cold):5.2f} s")


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 20
    tmp = Path(tempfile.mkdtemp(prefix="nanoclaw-bench-net-"))

    def script(req):
        tags = re.findall(r">([^<>]+)</message>", req.last_user_text())
        return Reply.say((tags[-1] if tags else "?") + "|ok")

    with FakeModel(script=script) as model:
        model_ref.append(model)
        base = {"NANOCLAW_GROUPS_DIR": str(tmp / "groups"), "TZ": "UTC", "ANTHROPIC_UPSTREAM_URL": model.url,
                "ANTHROPIC_API_KEY": "sk-bench-not-a-key", "NANOCLAW_INSTALL_ID": f"benchnet-{os.getpid()}",
                "NANOCLAW_FREEZE_IDLE_S": "1"}
        print(f"NanoClaw sessions over the network vs shared folders, {n} warm messages per leg, fake model")
        results: dict[str, dict] = {k: {"warm": [], "cold": [], "to_model": [], "back": []} for k in ("files", "network")}
        for i, kind in enumerate(("files", "network", "files", "network")):
            r = leg(kind, tmp / f"leg{i}", base, n, None, i)
            for key in results[kind]:
                results[kind][key] += r[key]
        engine = remote_engine()
        if engine is not None:
            r = leg("remote", tmp / "leg-remote", base, n, engine)
            results["remote"] = {key: r[key] for key in ("warm", "cold", "to_model", "back")}
        for name, r in results.items():
            show(name, r["warm"], r["cold"])
            print(f"{'':8s}   of which accepted -> model request p50 {pct(r['to_model'], .5) * 1000:5.1f} ms, "
                  f"model's last byte -> reply handed p50 {pct(r['back'], .5) * 1000:5.1f} ms")
        files, net = results["files"]["warm"], results["network"]["warm"]
        print(f"network / files: p50 x{pct(net, .5) / pct(files, .5):.2f}  mean "
              f"x{statistics.mean(net) / statistics.mean(files):.2f}  (goal <= x1.2)")
        if "remote" in results:
            print(f"remote engine / files: p50 x{pct(results['remote']['warm'], .5) / pct(files, .5):.2f}")


if __name__ == "__main__":
    main()
