"""A test's set-up commands (`flask --app app nanoclaw migrate`, `agent create …`, `wire …`) in one
process: each runs through Flask's own command line as `flask` would run it, but the app and its
imports are loaded once instead of once per command (~0.7 s of CPU each on a 2-core VM).

    python tests/cli_batch.py '[["migrate"], ["agent", "create", "Andy"]]'

Stops at the first command that fails, with its output and exit code."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from nanoclaw.config import PROJECT_ROOT


def run(commands: list[list[str]], env: dict[str, str], timeout: float = 120, input: str | None = None) -> str:
    """Run the commands in one child process with `env` (and `input` on its standard input, which
    the commands share); raises RuntimeError naming the one that failed."""
    done = subprocess.run([sys.executable, __file__, json.dumps(commands)], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, input=input)
    if done.returncode:
        raise RuntimeError(f"set-up failed: {done.stdout}{done.stderr}")
    return done.stdout


def main(commands: list[list[str]]) -> int:
    import click
    from flask.cli import cli
    for args in commands:
        try:
            cli.main(args=["--app", "app", "nanoclaw", *args], prog_name="flask", standalone_mode=False)
        except click.exceptions.Exit as exit_:
            code = exit_.exit_code
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        else:
            code = 0
        if code:
            print(f"`flask --app app nanoclaw {' '.join(args)}` exited {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    os.chdir(PROJECT_ROOT)
    sys.exit(main(json.loads(sys.argv[1])))
