"""split_text: chunks fit the limit and are cut where a reader expects (paragraph, line, word, hard)."""
import random

import pytest

from nanoclaw.channels.text import split_text


def test_short_text_is_one_chunk_and_blank_is_nothing():
    assert split_text("hello", 10) == ["hello"]
    assert split_text("x" * 10, 10) == ["x" * 10]
    assert split_text("", 10) == [] and split_text("  \n ", 10) == []


def test_prefers_paragraph_breaks():
    first, second = "First paragraph.\nStill first.", "Second paragraph here."
    assert split_text(f"{first}\n\n{second}", 40) == [first, second]


def test_falls_back_to_line_then_word_then_hard_cut():
    assert split_text("line one is here\nline two", 20) == ["line one is here", "line two"]
    assert split_text("alpha beta gamma delta", 12) == ["alpha beta", "gamma delta"]
    assert split_text("abcdefghijKLMNO", 10) == ["abcdefghij", "KLMNO"]


def test_boundary_exactly_at_the_limit_is_used():
    assert split_text("aaaaa bbbbb", 5) == ["aaaaa", "bbbbb"]
    assert split_text("aaaaa\n\nbbbbb", 5) == ["aaaaa", "bbbbb"]


@pytest.mark.parametrize("limit", [7, 50, 200, 2000])
def test_random_texts_keep_every_word_and_fit(limit):
    rng = random.Random(limit)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(1, 15))) for _ in range(800)]
    seps = [" ", " ", " ", "\n", "\n\n"]
    text = "".join(w + rng.choice(seps) for w in words).strip()
    chunks = split_text(text, limit)
    assert all(0 < len(c) <= limit for c in chunks)
    if limit >= 15:  # no word is longer than the limit, so none is cut
        assert " ".join(chunks).split() == words
    else:
        assert "".join("".join(chunks).split()) == "".join(words)


def test_rejects_a_useless_limit():
    with pytest.raises(ValueError):
        split_text("x", 0)
