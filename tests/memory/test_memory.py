"""Memory's rules and the history index without a sandbox (issue 40): entries and their limits, the
secrets a memory never holds, the scope each conversation gets from the host's records, a change
applied once however often its request is replayed, and searches on both databases (Hypothesis over
queries: never an error that reaches the agent, never a hit outside the conversation's reach)."""
from __future__ import annotations

import unicodedata

import pytest
from hypothesis import HealthCheck, example, given, settings as hsettings, strategies as st

from nanoclaw.memory import entries, history, notes, query
from nanoclaw.memory.entries import Change, Refused
from nanoclaw.memory.scopes import Reach, Scope, decide
from nanoclaw.memory.tables import History, Memory, MemoryChange


# --- entries (pure) -----------------------------------------------------------------------------

def test_add_replace_remove_and_the_limit():
    text = entries.apply("", Change("add", "likes tea"))
    text = entries.apply(text, Change("add", "lives in  Berlin\n(moved 2025)"))
    assert text == "likes tea\nlives in Berlin (moved 2025)"  # one line an entry
    assert entries.apply(text, Change("add", "likes tea")) == text  # no duplicate
    text = entries.apply(text, Change("replace", "likes coffee", old_text="tea"))
    assert entries.entries(text) == ["likes coffee", "lives in Berlin (moved 2025)"]
    assert entries.apply(text, Change("remove", old_text="Berlin")) == "likes coffee"
    with pytest.raises(Refused, match="no entry matches"):
        entries.apply(text, Change("remove", old_text="Paris"))
    with pytest.raises(Refused, match="2 entries match"):
        entries.apply("likes tea\nlikes cake", Change("remove", old_text="likes"))
    full = "\n".join(f"fact number {i:04d} about something worth keeping" for i in range(85))
    assert len(full) <= entries.MAX_CHARS
    with pytest.raises(Refused, match="full: consolidate first"):
        entries.apply(full, Change("add", "one more fact that does not fit in the memory any more"))


@pytest.mark.parametrize("line", ["my key sk-ant-api03-abcdefghijklmn", "token xoxb-1234567890-abcdefgh",
                                  "ghp_abcdefghijklmnopqrstuvwx", "aws AKIAABCDEFGHIJKLMNOP",
                                  "-----BEGIN PRIVATE KEY-----", "cafe" * 10, "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="])
def test_credentials_are_refused_and_personal_facts_kept(line):
    with pytest.raises(Refused):
        entries.apply("", Change("add", line))
    assert entries.apply("", Change("add", "locker code 4711, door code 1234#")) == "locker code 4711, door code 1234#"


def test_a_host_secret_value_is_refused_wherever_it_is_in_the_line():
    secret = "hunter2-but-longer"
    with pytest.raises(Refused, match="host's secrets"):
        entries.apply("", Change("add", f"the password is {secret}!"), (secret,))


# --- scopes (pure) --------------------------------------------------------------------------------

def roles(privileged=(), owner=()):
    return (lambda u: u in privileged), (lambda u: u in owner)


def test_a_person_s_own_conversations_are_private_and_everything_else_is_its_chat():
    is_priv, is_owner = roles({"telegram:111", "slack:U2"}, {"telegram:111"})
    dm = decide("telegram", "111", "dm", "telegram:111", is_priv, is_owner)
    assert dm.memory == Scope("private", "telegram:111") and dm.everything
    admin_dm = decide("slack", "D9", "dm", "slack:U2", is_priv, is_owner)
    assert admin_dm.memory == Scope("private", "slack:U2") and not admin_dm.everything  # its own chat only
    member_dm = decide("telegram", "222", "dm", "telegram:222", is_priv, is_owner)
    assert member_dm.memory == Scope("chat", "telegram:222")
    group = decide("telegram", "-100300", "group", "telegram:111", is_priv, is_owner)  # never a person's
    assert group.memory == Scope("chat", "telegram:-100300") and not group.everything
    web = decide("web", "andy|telegram:111", "dm", None, is_priv, is_owner)
    assert web.memory == Scope("private", "telegram:111") and web.everything
    stranger_web = decide("web", "andy|web:x", "dm", None, is_priv, is_owner)
    assert stranger_web.memory.kind == "chat"
    cli = decide("cli", "andy", "dm", "telegram:111", is_priv, is_owner)
    assert cli.memory == Scope("private", "telegram:111")


# --- the host's side: once per request, and searches ------------------------------------------------

def test_a_replayed_request_changes_memory_once(sqlite_app):
    settings = sqlite_app.config["NANOCLAW"]
    scope = Scope("chat", "telegram:-1")
    for _ in range(3):  # the op row applied again after a crash, and once more
        ok, told = notes.agent_change(settings, "andy", scope, Change("add", "meeting on Fridays"), session_id="s1",
                                      request_key="andy/s1/r1")
        assert ok and "next conversation" in told
    assert Memory.get().text == "meeting on Fridays" and MemoryChange.select().count() == 1
    ok, told = notes.agent_change(settings, "andy", scope, Change("add", "sk-ant-api03-abcdefghijklmnop"),
                                  session_id="s1", request_key="andy/s1/r2")
    assert not ok and "key" in told and Memory.get().text == "meeting on Fridays"


def test_a_session_changes_memory_at_most_30_times_a_minute(sqlite_app):
    """Issue 60, item 7: a hostile agent cannot grow the change records without limit; the 31st change in a
    minute is refused in words it reads (and not recorded), another session is not held back, and a
    minute later the session may change it again."""
    from datetime import timedelta
    from nanoclaw.models import utcnow
    settings = sqlite_app.config["NANOCLAW"]
    scope, now = Scope("chat", "telegram:-1"), utcnow()
    for n in range(30):
        ok, _told = notes.agent_change(settings, "andy", scope, Change("add", f"fact {n}"), session_id="s1",
                                       request_key=f"andy/s1/r{n}", now=now)
        assert ok
    ok, told = notes.agent_change(settings, "andy", scope, Change("add", "fact 30"), session_id="s1",
                                  request_key="andy/s1/r30", now=now)
    assert not ok and "30 times in the last minute" in told and "wait a minute" in told
    assert MemoryChange.select().count() == 30 and "fact 30" not in Memory.get().text
    assert notes.agent_change(settings, "andy", scope, Change("add", "other"), session_id="s2",
                              request_key="andy/s2/r0", now=now)[0]
    assert notes.agent_change(settings, "andy", scope, Change("add", "fact 30"), session_id="s1",
                              request_key="andy/s1/r31", now=now + timedelta(minutes=1, seconds=1))[0]


def test_clearing_a_scope_redacts_its_earlier_changes(sqlite_app):
    """`memory clear` (and the page's clear) leaves no words of the scope in its change records: who and
    when stay; another scope's records keep theirs."""
    settings = sqlite_app.config["NANOCLAW"]
    dm, team = Scope("private", "telegram:111"), Scope("chat", "telegram:-1")
    notes.agent_change(settings, "andy", dm, Change("add", "my locker code is 4711"), session_id="s1",
                       request_key="andy/s1/a")
    notes.person_change(settings, "cli", "andy", dm, "my locker code is 4711\nlikes tea")
    notes.agent_change(settings, "andy", team, Change("add", "standup at 9"), session_id="s2", request_key="andy/s2/a")
    notes.person_change(settings, "cli", "andy", dm, "", action="clear", why="asked to forget")
    kept = [(c.actor, c.action, c.before_text, c.after_text) for c in
            MemoryChange.select().where(MemoryChange.scope == dm.name).order_by(MemoryChange.id)]
    assert kept == [("agent:andy", "add", None, None), ("cli", "edit", None, None), ("cli", "clear", None, "")]
    assert "4711" not in " ".join(str(c.before_text) + str(c.after_text) + c.outcome for c in MemoryChange.select())
    assert MemoryChange.get(MemoryChange.scope == team.name).after_text == "standup at 9"


def database_bytes(settings) -> bytes:
    path = settings.data_dir / "nanoclaw.db"
    return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())


@pytest.mark.parametrize("how", ["forget", "prune"])
def test_after_a_forget_or_a_prune_no_word_is_left_in_the_database_files(sqlite_app, how):
    """Issue 60, item 6: `history forget` and retention leave nothing of the text readable from the files:
    not in the full-text index's pages, not in free pages, not in the write-ahead log."""
    settings = sqlite_app.config["NANOCLAW"]
    for i in range(40):  # enough rows for several index segments and pages
        history.add("andy", "telegram", "111", None, "s", f"w{i}", "telegram:111", "Olivia",
                    "2020-01-01T10:00:00" if how == "prune" else "2026-11-20T10:00:00",
                    f"my zanzibarquux code is {4700 + i} and more words to fill the page {i}")
    history.add("andy", "telegram", "222", None, "s", "kept", "telegram:222", "Bob", "2026-11-21T10:00:00",
                "the team meets on Fridays")
    history.catch_up()
    assert b"zanzibarquux" in database_bytes(settings)  # it is there to be found first
    if how == "forget":
        assert history.forget("andy", channel="telegram", chat_id="111") == 40
    else:
        assert history.prune(365) == 40
    found = database_bytes(settings)
    assert b"zanzibarquux" not in found and b"4711" not in found
    assert [h.text for h in History.select()] == ["the team meets on Fridays"]


def seed(folder="andy"):
    for i, (chat, who, text) in enumerate([
            ("111", "telegram:111", "my locker code is 4711"),
            ("111", "telegram:111", "Lunch with Ana at the Café Müller tomorrow"),
            ("-100300", "telegram:222", "the locker room is closed on Sundays"),
            ("-100300", "telegram:222", "e-mail the report to the team"),
            ("-100300", f"agent:{folder}", "I sent the report")]):
        history.add(folder, "telegram", chat, None, "s", f"k{i}", who, who.split(":")[1], f"2026-11-2{i}T10:00:00",
                    text)
    history.add("bea", "telegram", "111", None, "s", "k9", "telegram:111", "o", "2026-11-20T10:00:00",
                "bea saw the locker too")


DM = Reach(Scope("private", "telegram:111"), True, "telegram", "111")
TEAM = Reach(Scope("chat", "telegram:-100300"), False, "telegram", "-100300")


def texts_of(hits):
    return [h.text for h in hits]


def test_searches_match_prefixes_and_phrases_within_the_reach(app):
    seed()
    assert texts_of(history.search("andy", DM, "lock")[1]) == ["the locker room is closed on Sundays",
                                                                 "my locker code is 4711"]  # newest first
    assert texts_of(history.search("andy", TEAM, "lock")[1]) == ["the locker room is closed on Sundays"]
    assert texts_of(history.search("andy", DM, '"locker code"')[1]) == ["my locker code is 4711"]
    assert texts_of(history.search("andy", DM, '"code locker"')[1]) == []
    assert texts_of(history.search("andy", DM, "LOCKER 4711")[1]) == ["my locker code is 4711"]  # every word
    # case and accents aside, on both databases (issue 61: one folding at indexing and at query time)
    assert texts_of(history.search("andy", DM, "MÜLLER")[1]) == ["Lunch with Ana at the Café Müller tomorrow"]
    assert texts_of(history.search("andy", DM, "muller cafe")[1]) == ["Lunch with Ana at the Café Müller tomorrow"]
    assert texts_of(history.search("andy", TEAM, "e-mail")[1]) == ["e-mail the report to the team"]
    assert texts_of(history.search("andy", TEAM, "report")[1])[0] == "I sent the report"  # the agent's own too
    assert texts_of(history.search("andy", DM, "lock", before="2026-11-21T00:00:00")[1]) == ["my locker code is 4711"]
    assert texts_of(history.search("andy", DM, "lock", after="2026-11-21T00:00:00")[1]) == [
        "the locker room is closed on Sundays"]
    with pytest.raises(query.BadQuery):
        history.search("andy", DM, '" ! ?')


def test_case_and_accents_do_not_stand_between_a_word_and_its_message(app):
    """Issue 61, item 3: text typed with combining accents (NFD, as macOS keyboards produce) is found by its
    own words; Turkish İstanbul, istanbul and ISTANBUL find each other; muller finds Müller and Müller (NFC
    or NFD) finds muller. The same on SQLite and PostgreSQL."""
    said = [("k1", unicodedata.normalize("NFD", "Réunion à Zürich")), ("k2", "İstanbul'da buluşalım"),
            ("k3", "muller called"), ("k4", "ISTANBUL ROUTE")]
    for key, text in said:
        history.add("andy", "telegram", "111", None, "s", key, "telegram:111", "o", "2026-11-20T10:00:00", text)
    def found(words):
        return sorted(texts_of(history.search("andy", DM, words)[1]))
    nfd = said[0][1]
    assert found(unicodedata.normalize("NFD", "Zürich")) == [nfd] == found("zurich") == found("ZÜRICH")
    assert found("Réunion") == [nfd]
    for spelling in ("istanbul", "İstanbul", "ISTANBUL"):
        assert found(spelling) == ["ISTANBUL ROUTE", "İstanbul'da buluşalım"], spelling
    assert found("Müller") == ["muller called"] == found(unicodedata.normalize("NFD", "Müller"))


# letters of many scripts as people type them, combining accents, digits, spaces and punctuation; only
# characters both indexes' Unicode tables know (SQLite's unicode61 is Unicode 6.1: a letter assigned later
# is a separator there, a word character in Python)
_ALPHABET = [chr(c) for c in [*range(0x30, 0x3A), *range(0x41, 0x5B), *range(0x61, 0x7B), *range(0xC0, 0x180),
                              *range(0x300, 0x370), *range(0x391, 0x3CA), *range(0x410, 0x450), 0x130, 0x131,
                              *range(0x4E00, 0x4E40), *range(0xAC00, 0xAC20), 0x20, 0x20, 0x2C, 0x2E, 0x21, 0x27,
                              0x2D, 0x3F, 0xFB01, 0x1E9E]
             if chr(c) not in "×÷" and unicodedata.category(chr(c)) != "Cn"]  # U+03A2 is no letter
_ANY_WORDS = st.text(st.sampled_from(_ALPHABET), min_size=1, max_size=40)


@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_ANY_WORDS)
@example(text="0\u034f0")  # a combining grapheme joiner (class 0): PostgreSQL split the word at it
@example(text="0.0 example.com")  # PostgreSQL kept each as one token, a query cut it at the dot
def test_every_word_of_a_stored_message_finds_it(app, text):
    """Hypothesis over Unicode text: each word of a stored message, copied as it stands between spaces,
    finds that message."""
    import uuid
    key = uuid.uuid4().hex
    history.add("andy", "telegram", "111", None, "s", key, "telegram:111", "o", "2026-11-20T10:00:00", text)
    stored = text.strip()
    for word in stored.split()[:5]:
        try:
            hits = history.search("andy", DM, word, limit=50)[1]
        except query.BadQuery:
            continue  # a word that folds to nothing searchable (a lone combining mark) is not a word to find
        assert stored in texts_of(hits), (word, stored)


_WORDS = st.one_of(st.text(max_size=30), st.sampled_from(['"', "AND", "OR", "NOT", "NEAR(", "*", "^", "-", ":", "'",
                                                         "\\", "locker", '"locker', "lock*", "col:val", "a'b"]))


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(_WORDS, max_size=8), long=st.booleans())
def test_any_query_answers_without_an_error_and_never_outside_the_reach(app, words, long):
    if not history.oldest():
        seed()
    raw = " ".join(words) + (" x" * 400 if long else "")
    try:
        _terms, hits = history.search("andy", TEAM, raw)
    except query.BadQuery:
        return
    assert all(h.chat_id == "-100300" and h.channel == "telegram" for h in hits)
    _terms, everything = history.search("andy", DM, raw)
    assert all("bea saw" not in h.text for h in everything)  # never another agent's


def test_the_query_compiler_passes_no_operator_through():
    terms = query.parse('locker "room is" NEAR(x) col:val')
    assert query.fts5(terms) == '"locker"* AND "room is" AND "near x"* AND "col val"*'  # one word's tokens in a row
    assert query.tsquery(query.parse("it's e-mail")) == "('it' <-> 's':*) & ('e' <-> 'mail':*)"
