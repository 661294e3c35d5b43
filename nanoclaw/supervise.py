"""`make run`: resolve the settings (environment + .env), then hand the
foreground over to supervisord with the values its config refers to."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from .config import PROJECT_ROOT, Settings, SettingsError


def main() -> None:
    try:
        settings = Settings.load()
    except SettingsError as exc:
        print(f"nanoclaw: cannot start: {exc}", file=sys.stderr)
        sys.exit(2)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / "logs").mkdir(exist_ok=True)
    env = dict(os.environ,
               NANOCLAW_DATA_DIR=str(settings.data_dir),
               NANOCLAW_PORT=str(settings.port),
               NANOCLAW_VENV_BIN=str(Path(sys.executable).parent),
               # the Discord Gateway program runs only when there is a bot to connect as
               NANOCLAW_DISCORD_GATEWAY="true" if settings.platform.get("DISCORD_BOT_TOKEN") else "false")
    supervisord = Path(sys.executable).parent / "supervisord"
    print(f"nanoclaw: web on http://127.0.0.1:{settings.port} (data in {settings.data_dir}); Ctrl-C stops",
          file=sys.stderr, flush=True)
    os.chdir(PROJECT_ROOT)
    os.execve(str(supervisord), [str(supervisord), "-n", "-c", str(PROJECT_ROOT / "supervisord.conf")], env)


if __name__ == "__main__":
    main()
