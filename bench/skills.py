"""What checking an agent's skills costs each sandbox start (issue 66, item 5).

    .venv/bin/python -m bench.skills [N]       (N repetitions per case, default 20)

For each case the host does what `operator/skill_offer.py` does before a start: hash every pinned copy
again (`skill_store.verify`) and build the start's plugin folder of hard links (`skill_store.view`).
Cases: no skill; one typical skill (SKILL.md, a script and a reference: 12 KB); five typical ones; one
at the limits (200 files, 5 MB). Baselines, measured in the same run: reading the same bytes without
hashing (what any check must at least do), and starting an empty bubblewrap sandbox (`bwrap … true`,
the floor of a sandbox start; a real start with the SDK and CLI is seconds).
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from nanoclaw.operator.skill_format import read_folder  # noqa: E402


def make_skill(root: Path, name: str, files: int, size: int) -> Path:
    folder = root / name
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: bench skill\n---\nDo the thing.\n")
    for i in range(files - 1):
        (folder / "references" / f"r{i:03d}.md").write_bytes(os.urandom(size // 2).hex().encode()[:size])
    return folder


def timed(fn, n: int) -> float:
    runs = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) * 1000


def main(n: int) -> None:
    from nanoclaw.app import create_app
    from nanoclaw.config import Settings
    from nanoclaw.db import database
    from nanoclaw.migrate import apply_pending
    from nanoclaw.models import AgentGroup
    from nanoclaw.operator import skill_store

    tmp = Path(tempfile.mkdtemp(prefix="bench-skills-"))
    try:
        os.environ.update(NANOCLAW_DATA_DIR=str(tmp / "data"), DATABASE_URL=f"sqlite:///{tmp / 'data' / 'n.db'}",
                          NANOCLAW_GROUPS_DIR=str(tmp / "groups"), NANOCLAW_RUNTIME="bwrap")
        (tmp / "data").mkdir()
        settings = Settings.load(dict(os.environ), dotenv_path=tmp / "none.env")
        app = create_app(settings)
        with app.app_context():
            database.connect(reuse_if_open=True)
            apply_pending(database.obj, log=lambda _l: None)
            cases = {"none": [], "1 typical (3 files, 12 KB)": [("typical", 3, 6000)],
                     "5 typical": [(f"typical-{i}", 3, 6000) for i in range(5)],
                     "1 at the limits (200 files, 5 MB)": [("large", 200, 25_000)]}
            print(f"{'case':36} {'check+view ms':>14} {'read only ms':>13} {'ratio':>6}")
            for label, skills in cases.items():
                folder = f"agent{list(cases).index(label)}"
                agent = AgentGroup.create(name=folder, folder=folder)
                copies = []
                for name, files, size in skills:
                    src = make_skill(tmp / "src" / folder, name, files, size)
                    skill = read_folder(src)
                    skill_store.install(settings, agent, src, skill, str(src), "bench")
                    copies.append(skill_store.copy_path(settings, folder, skill.hash, name))

                def check():
                    checked = skill_store.verify(settings, folder)
                    skill_store.view(settings, "bench-sandbox", folder, checked.ready)

                def read_only():
                    for copy in copies:
                        for path in copy.rglob("*"):
                            if path.is_file():
                                path.read_bytes()
                ms, base = timed(check, n), timed(read_only, n)
                ratio = f"{ms / base:.1f}x" if base > 0.01 else "-"
                print(f"{label:36} {ms:14.2f} {base:13.2f} {ratio:>6}")
        if shutil.which("bwrap"):
            bwrap = timed(lambda: subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "true"], check=False),
                          n)
            print(f"baseline: an empty bubblewrap sandbox starts in {bwrap:.2f} ms (median of {n})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
