"""The Matrix fixtures are what Synapse really sends (issue 45): recorded again from the suite's
Synapse on each run, every committed fixture must have the recorded one's shape (the same keys at
the same places, with values of the same types). When a Synapse release changes a shape, this
fails and says how to record them anew."""
from __future__ import annotations

import json

from conftest import require
from tests.platforms import synapse
from tests.platforms.record_matrix import FIXTURES, record


def shape(value, path: str = "") -> set[tuple[str, str]]:
    """Every leaf's path and type; a list's items share one path."""
    if isinstance(value, dict):
        return {("" if not path else path, "object")} | {s for k, v in value.items() for s in shape(v, f"{path}.{k}")}
    if isinstance(value, list):
        return {(path, "array")} | {s for v in value for s in shape(v, f"{path}[]")}
    return {(path, type(value).__name__)}


def test_the_committed_fixtures_have_the_shape_synapse_sends_today(tmp_path):
    require(*synapse.available())
    names = record(tmp_path)
    committed = {p.stem for p in FIXTURES.glob("*.json")} - {"cases"}
    assert committed == set(names), "fixtures not recorded: python -m tests.platforms.record_matrix"
    for name in names:
        fresh = json.loads((tmp_path / f"{name}.json").read_text())
        kept = json.loads((FIXTURES / f"{name}.json").read_text())
        assert shape(kept) == shape(fresh), (
            f"{name}: Synapse now sends another shape (+ new, - gone): "
            f"+{sorted(shape(fresh) - shape(kept))} -{sorted(shape(kept) - shape(fresh))}; "
            "record anew with python -m tests.platforms.record_matrix")
    cases = json.loads((tmp_path / "cases.json").read_text())
    assert [c["fixture"] for c in cases["cases"]] == \
        [c["fixture"] for c in json.loads((FIXTURES / "cases.json").read_text())["cases"]]
