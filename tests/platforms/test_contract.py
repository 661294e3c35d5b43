"""What every chat platform's webhook must do, checked for each platform in the registry with its
real payloads (tests/fixtures/<name>/: the payloads, and cases.json with the outcome of each) and
its kit (kits.py: its settings and how a request is signed). A new platform is checked by adding
its fixtures and its kit; the test below fails until it has both.

- each real shape has its outcome: the event accepted for routing (who the agent will see as the
  sender, in which chat), the answer the platform gets, or nothing accepted (and, for a malformed
  payload, counted once);
- a forged request (unsigned, signed wrong, or a body changed after signing) is refused and nothing
  is stored; without its secret configured every request is refused;
- an authentic but unreadable body is answered (never a 5xx), counted once, and nothing stored; a
  body over 1 MiB is 413;
- Hypothesis: any JSON, and the real payloads with any part replaced or removed, never a 5xx.

One app (SQLite, the real routes) has every platform configured; their APIs point at a closed
port, so a look-up a parser makes fails fast, as a platform outage would. Routing is held back,
so each accepted event stays in inbound_events exactly as the router will read it."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from conftest import malformed_total
from nanoclaw import platforms
from nanoclaw.app import create_app
from nanoclaw.config import Settings
from nanoclaw.db import database
from nanoclaw.migrate import apply_pending
from nanoclaw.models import AcceptedEvent, DroppedMessage
from tests.platforms.kits import KITS

FIXTURES = Path(__file__).parent.parent / "fixtures"
NAMES = platforms.names()
EXAMPLES = hypothesis_settings(max_examples=250, deadline=None, derandomize=True,
                               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def fixture(platform: str, name: str) -> dict:
    return json.loads((FIXTURES / platform / f"{name}.json").read_text())


def cases_of(platform: str) -> dict:
    path = FIXTURES / platform / "cases.json"
    return json.loads(path.read_text()) if path.exists() else {"cases": [], "fuzz": []}


CASES = [(p, c) for p in NAMES for c in cases_of(p)["cases"]]


class HeldIntake:
    def submit(self, row_ids):
        pass


def app_for(root: Path, without: str | None = None):
    dead = closed_port()
    env = {k: v for kit in KITS.values() for k, v in kit.env(dead).items() if k != without}
    app = create_app(Settings.load(environ={
        "NANOCLAW_DATA_DIR": str(root / "data"), "NANOCLAW_GROUPS_DIR": str(root / "groups"), "TZ": "UTC",
        "DATABASE_URL": f"sqlite:///{root / 'data' / 'nanoclaw.db'}", "NANOCLAW_MOUNT_ALLOWLIST": str(root / "a.json"),
        **env}, dotenv_path=root / "none.env"))
    app.extensions["nanoclaw.intake"] = HeldIntake()
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    return app


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    app = app_for(tmp_path_factory.mktemp("contract"))
    yield app
    database.close()


def stored() -> tuple[int, int]:
    return AcceptedEvent.select().count(), DroppedMessage.select().count()


def accepted(channel: str, event_id: str) -> dict | None:
    row = AcceptedEvent.get_or_none((AcceptedEvent.channel == channel) & (AcceptedEvent.event_id == event_id))
    return json.loads(row.payload) if row is not None and row.payload else None


def first_message(platform: str) -> tuple[dict, str]:
    """A real payload of the platform that is accepted when signed right (its first fuzz fixture)."""
    item = cases_of(platform)["fuzz"][0]
    return fixture(platform, item["fixture"]), item.get("kind", "")


def test_every_platform_has_its_kit_and_its_real_payloads():
    assert set(KITS) == set(NAMES)
    for name in NAMES:
        found = cases_of(name)
        assert found["cases"] and found["fuzz"], f"tests/fixtures/{name}/cases.json: no cases"


@pytest.mark.parametrize("platform,case", CASES, ids=[f"{p}/{c['fixture']}" for p, c in CASES])
def test_a_real_shape_has_its_outcome(app, platform, case):
    kit, payload, expect = KITS[platform], fixture(platform, case["fixture"]), case["expect"]
    before_events = AcceptedEvent.select().where(AcceptedEvent.payload.is_null(False)).count()
    before_malformed = malformed_total(platform)
    resp = kit.post(app.test_client(), payload, kind=case.get("kind", ""))
    assert resp.status_code == 200, resp.get_data(as_text=True)
    if "event" in expect:
        event_id = case.get("event_id") or payload["entry"][0]["changes"][0]["value"]["messages"][0]["id"]
        found = accepted(platform, event_id)
        assert found is not None, f"{case['fixture']}: not accepted for routing"
        assert {k: found[k] for k in expect["event"]} == expect["event"]
        return
    assert AcceptedEvent.select().where(AcceptedEvent.payload.is_null(False)).count() == before_events
    if "answer" in expect:
        want = {"challenge": payload["challenge"]} if expect["answer"] == "challenge" else expect["answer"]
        assert resp.get_json() == want
    elif "answer_type" in expect:
        assert resp.get_json()["type"] == expect["answer_type"]
    elif "malformed" in expect:
        assert resp.get_json() == expect["malformed"] and malformed_total(platform) == before_malformed + 1
    else:
        assert malformed_total(platform) == before_malformed, f"{case['fixture']}: counted as malformed"


@pytest.mark.parametrize("platform", NAMES)
@pytest.mark.parametrize("how", ["unsigned", "signed wrong", "changed after signing"])
def test_a_forged_request_is_refused_and_nothing_is_stored(app, platform, how):
    kit = KITS[platform]
    payload, kind = first_message(platform)
    before = stored()
    client = app.test_client()
    if how == "unsigned":
        resp = kit.post(client, payload, kind=kind, headers={"Content-Type": "application/json"})
    elif how == "signed wrong":
        resp = kit.post(client, payload, kind=kind, right=False)
    else:
        tampered = kit.body(payload, kind).replace(b'"', b' "', 1)
        resp = kit.post(client, payload, kind=kind, body=tampered)
        if platform == "telegram":  # its header is a shared secret, not a body signature: nothing to break
            resp = kit.post(client, None, body=tampered, right=False)
    assert resp.status_code == 401, (how, resp.status_code)
    assert stored() == before


@pytest.mark.parametrize("platform", NAMES)
def test_without_its_secret_every_request_is_refused(tmp_path, platform, caplog):
    kit = KITS[platform]
    database.close()
    app = app_for(tmp_path, without=kit.secret)
    try:
        payload, kind = first_message(platform)
        before = stored()
        assert kit.post(app.test_client(), payload, kind=kind).status_code in (401, 403)
        assert stored() == before and f"{kit.secret} is not set" in caplog.text
    finally:
        database.close()


@pytest.mark.parametrize("platform", NAMES)
def test_an_authentic_but_unreadable_body_is_answered_counted_and_nothing_stored(app, platform):
    kit = KITS[platform]
    before, before_malformed = stored(), malformed_total(platform)
    resp = kit.post(app.test_client(), b"{not json")
    assert resp.status_code < 500
    assert stored() == before and malformed_total(platform) == before_malformed + 1


@pytest.mark.parametrize("platform", NAMES)
def test_a_body_over_one_mib_is_413(app, platform):
    before = stored()
    assert KITS[platform].post(app.test_client(), b"x" * (1024 * 1024 + 1)).status_code == 413
    assert stored() == before


# --- any JSON, and real payloads with a part swapped or removed: never a 5xx ------------------------

scalars = st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False) \
    | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=16)


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, child in value.items():
            yield from paths(child, prefix + (key,))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from paths(child, prefix + (i,))


def replaced(value, path, new, remove=False):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    head = path[0]
    if len(path) == 1 and remove and isinstance(copy, dict):
        copy.pop(head, None)
        return copy
    copy[head] = replaced(copy[head], path[1:], new, remove)
    return copy


@st.composite
def mutated(draw, payloads: list[dict]):
    """A real payload with one part (any depth) replaced by any JSON value, or removed."""
    payload = draw(st.sampled_from(payloads))
    path = draw(st.sampled_from(list(paths(payload))))
    return replaced(payload, path, draw(json_values), remove=draw(st.booleans()))


def kinds_of(platform: str) -> list[tuple[str, str]]:
    return sorted({(platform, i.get("kind", "")) for i in cases_of(platform)["fuzz"]})


@pytest.mark.parametrize("platform,kind", [pk for p in NAMES for pk in kinds_of(p)],
                         ids=[f"{p}/{k or 'webhook'}" for n in NAMES for p, k in kinds_of(n)])
def test_any_payload_never_gets_a_5xx(app, platform, kind):
    real = [fixture(platform, i["fixture"]) for i in cases_of(platform)["fuzz"] if i.get("kind", "") == kind]

    @EXAMPLES
    @given(payload=st.one_of(json_values, mutated(real)))
    def check(payload):
        assert KITS[platform].post(app.test_client(), payload, kind=kind).status_code < 500
    check()


# --- times at the edges (issue 60, item 1) -------------------------------------------------------

TIME_KEYS = {"date", "edit_date", "ts", "event_ts", "timestamp", "origin_server_ts", "serverReceivedTimestamp",
             "serverDeliveredTimestamp", "age"}
EDGE_TIMES = st.sampled_from([0, -1, 2**53 - 1, 2**53, 2**62, 2**63 - 1, 2**63, -2**63, 2**64, 1e300, -1e300,
                              0.5, 1700000000.25, "1700000000", "2**62", "", None, True])


@pytest.mark.parametrize("platform", NAMES)
def test_a_time_at_the_edges_never_gets_a_5xx_and_what_is_kept_is_in_the_window(app, platform):
    """Every time field of a real message set to a number at the edges (0, negative, 2^53, 2^62, 2^63,
    floats, text): answered below 500, and each event accepted keeps a time no later than five minutes
    from now (a far-future time would outlive the history's retention)."""
    import time
    from datetime import datetime
    payload, kind = first_message(platform)
    where = [p for p in paths(payload) if p and p[-1] in TIME_KEYS]
    assert where, f"{platform}: its first message has no time field"

    @hypothesis_settings(EXAMPLES, max_examples=120)
    @given(values=st.lists(EDGE_TIMES, min_size=len(where), max_size=len(where)), salt=st.integers(0, 10**9))
    def check(values, salt):
        changed = payload
        for path, value in zip(where, values):
            changed = replaced(changed, path, value)
        resp = KITS[platform].post(app.test_client(), changed, kind=kind)
        assert resp.status_code < 500, resp.get_data(as_text=True)[:300]
    check()
    latest = time.time() + 300 + 5  # the five minutes
    for row in AcceptedEvent.select().where(AcceptedEvent.channel == platform, AcceptedEvent.payload.is_null(False)):
        said = datetime.fromisoformat(json.loads(row.payload)["timestamp"].replace("Z", "+00:00")).timestamp()
        assert said <= latest, f"{platform} kept {json.loads(row.payload)['timestamp']}"


def test_a_parser_that_raises_is_a_malformed_payload_not_a_5xx(app, monkeypatch):
    """A payload no shape foresaw breaks a parser: answered as malformed (logged once with its traceback,
    counted), never a 5xx that a platform, or a listener, would offer again for ever."""
    from nanoclaw.channels.base import get_adapter
    adapter = get_adapter("signal", app.config["NANOCLAW"])
    monkeypatch.setattr(adapter, "parse", lambda payload: [][1])
    before, stored_before = malformed_total("signal"), stored()
    payload, kind = first_message("signal")
    resp = KITS["signal"].post(app.test_client(), payload, kind=kind)
    assert resp.status_code == 200
    assert malformed_total("signal") == before + 1 and stored() == stored_before
