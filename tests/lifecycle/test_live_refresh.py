"""The delivery loop's list of live sessions: a wake adds its session at once, so the loop's own
refresh (every LIVE_REFRESH_S) is left out when the sweep's refresh is newer. Each refresh lists
the runtime's sandboxes (pid files and /proc on bubblewrap, an API call on Docker): done twice in
the same seconds it was most of what three warm, quiet sandboxes cost the web program."""
from __future__ import annotations

from nanoclaw.lifecycle.background import Background


class CountingManager:
    """What the background asks of the sandbox manager here: the running sandboxes' names."""

    def __init__(self):
        self.listings = 0
        self.queue = []

    def running(self) -> list[str]:
        self.listings += 1
        return []

    def stop(self, folder: str, session_id: str) -> None:
        raise AssertionError("nothing runs here to stop")


def test_the_delivery_loops_refresh_is_left_out_while_the_sweeps_is_fresh(sqlite_app):
    manager = CountingManager()
    bg = Background(settings=sqlite_app.config["NANOCLAW"], manager=manager, lock_handle=None)
    bg.refresh_unless_fresh(10.0)  # none yet: it lists
    assert manager.listings == 1
    bg.sweep()  # the sweep refreshes too
    assert manager.listings == 2
    bg.refresh_unless_fresh(10.0)
    assert manager.listings == 2, "the sandboxes were listed again seconds after the sweep listed them"
    bg.refresh_unless_fresh(0.0)  # older than allowed: it lists
    assert manager.listings == 3


def test_a_woken_session_is_live_at_once_without_any_refresh(sqlite_app, tmp_path):
    manager = CountingManager()
    bg = Background(settings=sqlite_app.config["NANOCLAW"], manager=manager, lock_handle=None)
    path = sqlite_app.config["NANOCLAW"].sessions_dir / "andy" / "s1"
    bg.watch(path)
    assert path in bg.live and manager.listings == 0
