"""`make run`: resolve the settings (environment + .env), then hand the
foreground over to supervisord with the values its config refers to."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import platforms
from .config import PROJECT_ROOT, Settings, SettingsError, install_secret


def has_owner(settings) -> bool | None:
    """Whether anyone owns this install; None when the database cannot tell (never blocks start)."""
    from .db import open_database
    db = open_database(settings.database_url)
    try:
        db.connect()
        return db.execute_sql("SELECT 1 FROM user_roles WHERE role = 'owner' LIMIT 1").fetchone() is not None
    except Exception:
        return None
    finally:
        db.close()


INSTALL_BWRAP = "sudo scripts/install-sandboxes.sh bwrap"


def ensure_runtime(settings) -> None:
    """Before the service starts: when no sandbox runtime works, install bubblewrap if this user can
    (root with apt), else say the one command that gives one. The service starts either way and
    answers what waited once a runtime works."""
    from .runtime.base import RuntimeUnavailable
    from .runtime.select import select_runtime, setup_action
    try:
        select_runtime(settings, lambda _line: None)
        return
    except RuntimeUnavailable as exc:
        why = str(exc)
    action = setup_action(settings.runtime, shutil.which("bwrap") is not None, os.geteuid() == 0,
                          shutil.which("apt-get") is not None)
    if action == "install":
        print("nanoclaw: no sandbox runtime works here; installing bubblewrap (scripts/install-sandboxes.sh bwrap)",
              file=sys.stderr, flush=True)
        subprocess.run([str(PROJECT_ROOT / "scripts" / "install-sandboxes.sh"), "bwrap"], check=False)
        try:
            select_runtime(settings, lambda _line: None)
            print("nanoclaw: bubblewrap works now; agents run in it", file=sys.stderr, flush=True)
            return
        except RuntimeUnavailable as exc:
            why = str(exc)
    print(f"nanoclaw: {why}", file=sys.stderr)
    print(f"nanoclaw: starting anyway: messages are kept and answered once a runtime works (no restart needed); "
          f"to get one run `{INSTALL_BWRAP}`", file=sys.stderr, flush=True)


def listener_programs(settings, project: Path, venv_bin: Path) -> str:
    """supervisord sections for the listener programs this configuration wants (pure): a platform's
    program only when its settings ask for it (a bot token there, no webhook configured, …). The
    others get no section at all: supervisord's stop takes one pass of its 1 s loop per program
    group, stopped or not, so six idle sections made every stop of the service (^C, a restart)
    about five seconds longer. Settings are read at `make run`, so a platform set up later needs
    that restart anyway."""
    sections = []
    for platform in platforms.all_platforms():
        for listener in platform.listeners:
            if not listener.wanted(settings.platform):
                continue
            sections.append(
                f"[program:{listener.program}]\n"
                f"command={venv_bin}/flask --app app nanoclaw {' '.join(listener.command)}\n"
                f"directory={project}\n"
                f"autorestart=true\nstartsecs={listener.startsecs}\nstopsignal=TERM\n"
                f"stopwaitsecs={listener.stopwaitsecs}\n"
                "stdout_logfile=/dev/stdout\nstdout_logfile_maxbytes=0\nredirect_stderr=true\n")
    return "\n".join(sections)


def write_listener_programs(settings, project: Path, venv_bin: Path) -> Path:
    """The generated part of supervisord's configuration, included by supervisord.conf."""
    folder = settings.data_dir / "supervisor.d"
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.conf"):
        old.unlink()
    path = folder / "listeners.conf"
    path.write_text("; written by `make run` (nanoclaw/supervise.py) from the platforms' declarations\n\n"
                    + listener_programs(settings, project, venv_bin))
    return path


def main() -> None:
    try:
        settings = Settings.load()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        install_secret(settings)  # made once here, before the programs that share it start
    except SettingsError as exc:
        print(f"nanoclaw: cannot start: {exc}", file=sys.stderr)
        sys.exit(2)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "logs").mkdir(exist_ok=True)
    ensure_runtime(settings)
    metrics_dir = settings.data_dir / "metrics"  # prometheus-client's multiprocess files, fresh per start
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir()
    env = dict(os.environ,
               PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
               NANOCLAW_DATA_DIR=str(settings.data_dir),
               NANOCLAW_PORT=str(settings.port),
               NANOCLAW_VENV_BIN=str(Path(sys.executable).parent))
    write_listener_programs(settings, PROJECT_ROOT, Path(sys.executable).parent)
    supervisord = Path(sys.executable).parent / "supervisord"
    print(f"nanoclaw: web on http://127.0.0.1:{settings.port} (data in {settings.data_dir}); Ctrl-C stops",
          file=sys.stderr, flush=True)
    if has_owner(settings) is False:
        print("nanoclaw: next step: in another terminal run `.venv/bin/flask --app app nanoclaw pair` and send "
              "the code it prints to your bot in a direct message", file=sys.stderr, flush=True)
    os.chdir(PROJECT_ROOT)
    os.execve(str(supervisord), [str(supervisord), "-n", "-c", str(PROJECT_ROOT / "supervisord.conf")], env)


if __name__ == "__main__":
    main()
