"""What an agent may reach of the web, decided from the host's records (nanoclaw/reading/access.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from nanoclaw.reading.access import BROWSER_TOOLS, Access, RateWindow, access_of, changed, read_refusal, search_refusal, withheld


def test_reading_off_withholds_the_tool_and_refuses_a_read_that_arrives_anyway():
    off = Access(read="off", search="on", browser="on")
    assert withheld(off, True) == {"web_read"}
    assert withheld(Access(read="listed", search="on", browser="on"), True) == set()
    browser = set(BROWSER_TOOLS)  # off unless the owner turns it on
    assert withheld(Access(search="on")) == {"web_search"} | browser  # no provider set up: no search tool
    assert withheld(Access(search="off"), True) == {"web_search"} | browser
    assert "NANOCLAW_SEARCH" in search_refusal(Access(search="on"), False)
    assert "off for this agent" in search_refusal(Access(search="off"), True)
    assert "off for this agent" in read_refusal(off, "example.com", 443, lambda h, p: True)


def test_listed_reads_only_the_allowlisted_hosts():
    listed = Access(read="listed")
    allow = {("docs.example.com", 443)}
    assert read_refusal(listed, "docs.example.com", 443, lambda h, p: (h, p) in allow) is None
    why = read_refusal(listed, "evil.example", 8080, lambda h, p: (h, p) in allow)
    assert "egress allowlist" in why and "evil.example:8080" in why


def test_a_row_with_a_value_the_code_does_not_know_reaches_nothing():
    assert access_of(SimpleNamespace(read="yes", search="maybe", browser="on")) == Access("off", "off", "on")


def test_the_owners_change_names_a_bad_value():
    assert changed(Access(), "listed", None, None) == Access(read="listed")
    with pytest.raises(ValueError, match="--search takes on or off"):
        changed(Access(), None, "sometimes", None)


def test_thirty_reads_a_minute_per_session():
    window = RateWindow(30, 60.0)
    assert all(window.admit("s1", t * 0.1) is None for t in range(30))
    wait = window.admit("s1", 3.0)
    assert wait is not None and 56 < wait <= 60  # the first read leaves the window 60 s after it
    assert window.admit("s2", 3.0) is None  # another session has its own
    assert window.admit("s1", 60.5) is None
