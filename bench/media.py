"""What a photo costs: the time it adds from the message to the model's request, against a text
message in the same run, and a sandbox's memory after twenty pictures.

    .venv/bin/python -m bench.media [ROUNDS] [--runtime bwrap|docker]   (default 10 rounds, bwrap)

Each round sends a text message, a phone-sized photo (4032x3024, smooth like a real scene) and the
hard case (4032x3024 of pure noise, about 8 MB, which no codec shrinks) to one agent through the
real pipe: a Telegram webhook → the
router (which downloads the photo from the fake Bot API into inbox/) → the runner in a real
sandbox (which decodes and scales it in its worker) → the SDK and CLI → the proxy → the fake model.
Timed: the webhook's acknowledgement to the model request's arrival at the fake. The difference of
the medians is what a photo adds. Memory: the sandbox's cgroup (Docker) or its process tree's RSS
(bubblewrap) after the text turns, and again after the pictures.
"""
from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "container")]
os.environ.setdefault("CI", "")

from PIL import Image  # noqa: E402

from fakes.model_api import Reply  # noqa: E402
from nanoclaw.config import Settings  # noqa: E402
from tests.tg_flow import message, person, sandbox_service, sent  # noqa: E402

ALICE = 111222333


def brain(req):
    return Reply.say(f"ok {len(req.blocks('image'))}")


def photo_bytes(smooth: bool) -> bytes:
    from PIL import ImageFilter
    image = Image.frombytes("RGB", (4032, 3024), os.urandom(4032 * 3024 * 3))
    if smooth:
        image = image.filter(ImageFilter.GaussianBlur(3))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90 if smooth else 80)
    return out.getvalue()


def photo_update(n: int, file_id: str) -> dict:
    update = message(ALICE, person(ALICE, "Alice"), "")
    msg = update["message"]
    del msg["text"]
    msg.update(caption=f"photo {n}", photo=[
        {"file_id": file_id + "-s", "file_unique_id": "s", "file_size": 1500, "width": 90, "height": 68},
        {"file_id": file_id, "file_unique_id": "x", "file_size": 0, "width": 4032, "height": 3024}])
    return update


def tree_rss_kb(pid: int) -> int:
    """The RSS of a process and all its descendants (kB), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
        todo += children.get(p, [])
    return total


def sandbox_memory_mb(svc) -> float:
    rt = svc.runtime
    [name] = rt.list_sandboxes(svc.settings.install_id)
    if svc.settings.runtime == "docker":
        stats = rt.client.containers.get(name).stats(stream=False)["memory_stats"]
        cache = (stats.get("stats") or {}).get("inactive_file", 0)
        return (stats["usage"] - cache) / 2**20
    pid = rt.pid_of(name)
    return tree_rss_kb(pid) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rounds", nargs="?", type=int, default=10)
    parser.add_argument("--runtime", choices=("bwrap", "docker"), default="bwrap")
    args = parser.parse_args()
    pictures = {"photo": photo_bytes(smooth=True), "noise": photo_bytes(smooth=False)}
    with tempfile.TemporaryDirectory() as tmp:
        def make_settings(**env):
            base = {"NANOCLAW_DATA_DIR": f"{tmp}/data", "NANOCLAW_GROUPS_DIR": f"{tmp}/groups", "TZ": "UTC",
                    "NANOCLAW_MOUNT_ALLOWLIST": f"{tmp}/allow.json", "NANOCLAW_FREEZE_IDLE_S": "0"}
            return Settings.load(environ={**base, **{k: str(v) for k, v in env.items()}}, dotenv_path=Path(tmp) / "no")
        with sandbox_service(make_settings, f"sqlite:///{tmp}/nanoclaw.db", brain, runtime=args.runtime) as svc:
            svc.cli("agent", "create", "Andy")
            svc.cli("user", "add", f"telegram:{ALICE}", "--role", "owner")
            svc.cli("wire", "telegram", str(ALICE), "andy")
            answers = lambda: len(sent(svc.tg))  # noqa: E731

            def timed(update) -> float:
                calls, before = len(svc.model.model_calls()), answers()
                started = time.monotonic()
                svc.post(update)
                svc.wait(lambda: len(svc.model.model_calls()) > calls, what="the model request")
                arrived = svc.model.model_calls()[calls].received_mono
                svc.wait(lambda: answers() > before, what="the answer")
                return (arrived - started) * 1000

            timed(message(ALICE, person(ALICE, "Alice"), "warm up"))  # the sandbox's cold start
            texts, timings = [], {"photo": [], "noise": []}
            for n in range(args.rounds):
                texts.append(timed(message(ALICE, person(ALICE, "Alice"), f"text {n}")))
            before = sandbox_memory_mb(svc)
            for n in range(args.rounds):
                texts.append(timed(message(ALICE, person(ALICE, "Alice"), f"text again {n}")))
                for kind, data in pictures.items():
                    file_id = f"AgACAgIAAxk-bench-{kind}-{n}"
                    svc.tg.add_file(data, file_id=file_id, file_path=f"photos/{kind}_{n}.jpg")
                    timings[kind].append(timed(photo_update(n, file_id)))
            after = sandbox_memory_mb(svc)
            assert all(c.blocks("image") for c in svc.model.model_calls() if "photo " in c.current_prompt())
    t50 = statistics.median(texts)
    print(f"runtime {args.runtime}, {args.rounds} rounds; 4032x3024 JPEGs: photo "
          f"{len(pictures['photo']) / 2**20:.1f} MB, noise {len(pictures['noise']) / 2**20:.1f} MB")
    print(f"text  message -> model request: p50 {t50:7.0f} ms  max {max(texts):7.0f} ms")
    for kind, times in timings.items():
        p50 = statistics.median(times)
        print(f"{kind:5} message -> model request: p50 {p50:7.0f} ms  max {max(times):7.0f} ms  "
              f"(adds {p50 - t50:.0f} ms to a text message)")
    print(f"sandbox memory: {before:.0f} MB after the text turns, {after:.0f} MB after {2 * args.rounds} pictures "
          f"(+{after - before:.0f} MB)")


if __name__ == "__main__":
    main()
