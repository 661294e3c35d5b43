"""`python -m nanoclaw.proxy`: the supervisord `proxy` program, without Flask or the web app (the
door needs the settings, the central database for budgets and agent groups, and itself: about half
the memory of `flask --app app nanoclaw proxy`, which loads every page and command first)."""
from __future__ import annotations

import functools
import sys


def main() -> int:
    from ..config import Settings, SettingsError
    try:
        settings = Settings.load()
    except SettingsError as exc:
        print(f"nanoclaw proxy: cannot start: {exc}", file=sys.stderr)
        return 2
    from ..config import lighten_program
    lighten_program(settings.database_url)
    from .. import logs, proposal_rules
    from ..db import bind, database
    from ..models import AgentGroup
    from ..upstreams import registry
    from . import serve_forever
    from .policy_files import audit_change, policy_root
    logs.configure(settings.log_format)
    proposal_rules.reserve(lambda: registry.secret_names(settings.data_dir / "policy"))  # as the web app does
    bind(settings.database_url)

    def list_folders():
        with database.connection_context():
            return [a.folder for a in AgentGroup.select(AgentGroup.folder)]
    serve_forever(settings, list_folders, on_policy_change=functools.partial(audit_change, root=policy_root(settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
