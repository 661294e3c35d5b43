"""A sandbox's pass reaches only its own session and agent, and only while its start is current."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, strategies as st

from nanoclaw.remote import passes

KEY = passes.door_key("k" * 40)
CLAIMS = passes.Claims("home", "andy", "abc123", "n0nce", int(time.time()) + 10**8)  # valid however long a run takes


def test_a_pass_says_what_it_was_minted_for():
    assert passes.verify(KEY, passes.mint(KEY, CLAIMS), install="home") == CLAIMS


@pytest.mark.parametrize("why,token,install,now", [
    ("another key", passes.mint(passes.door_key("x" * 40), CLAIMS), "home", None),
    ("another install", passes.mint(KEY, CLAIMS), "work", None),
    ("expired", passes.mint(KEY, CLAIMS), "home", CLAIMS.expires + 1),
])
def test_a_pass_is_refused(why, token, install, now):
    with pytest.raises(passes.BadPass):
        passes.verify(KEY, token, install=install, now=now)


def test_changing_any_claim_breaks_the_signature():
    body, mac = passes.mint(KEY, CLAIMS).split(".")
    other = passes.mint(KEY, passes.Claims("home", "bob", "abc123", "n0nce", CLAIMS.expires)).split(".")[0]
    with pytest.raises(passes.BadPass, match="signature"):
        passes.verify(KEY, f"{other}.{mac}", install="home")


@given(st.text(max_size=300))
def test_any_string_is_refused_without_a_crash(token):
    with pytest.raises(passes.BadPass):
        passes.verify(KEY, token, install="home")


@given(st.binary(max_size=200))
def test_a_forged_body_under_any_mac_is_refused(raw):
    token = passes._b64(raw) + "." + passes.mint(KEY, CLAIMS).split(".")[1]
    with pytest.raises(passes.BadPass):
        passes.verify(KEY, token, install="home")


def test_a_pass_is_renewed_only_in_the_second_half_of_its_life():
    now = time.time()
    young = passes.Claims("home", "andy", "abc", "n", int(now + passes.PASS_TTL_S))
    assert passes.renewed(KEY, young, now) is None
    old = passes.Claims("home", "andy", "abc", "n", int(now + 60))
    fresh = passes.verify(KEY, passes.renewed(KEY, old, now), install="home")
    assert (fresh.folder, fresh.session, fresh.nonce) == ("andy", "abc", "n") and fresh.expires > old.expires
