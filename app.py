"""Entry point: `gunicorn app:app`, `flask --app app nanoclaw ...`."""
import sys

from nanoclaw.app import create_app
from nanoclaw.config import SettingsError

try:
    app = create_app()
except SettingsError as exc:  # one line naming the variable, never a traceback
    print(f"nanoclaw: cannot start: {exc}", file=sys.stderr)
    sys.exit(2)
