"""Waits for the end-to-end files that ran in a process of their own beside the suite
(tests/beside.py) and reports their outcome: this test fails with their output when any failed."""
from __future__ import annotations

import beside


def test_the_end_to_end_files_run_beside_pass():
    code, output = beside.result()
    assert code == 0, output[-8000:]
