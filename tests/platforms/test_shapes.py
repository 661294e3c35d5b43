"""The edge's shapes (channels/shapes.py): what a platform's payload must look like, read leniently
where platforms are, and any other value refused with a short reason (never another exception,
which a webhook would answer with a 500)."""
import pytest
from hypothesis import given, settings, strategies as st

from nanoclaw.channels import shapes
from nanoclaw.platforms.discord import schema as ds
from nanoclaw.platforms.matrix import schema as mx
from nanoclaw.platforms.signal import schema as sg
from nanoclaw.platforms.slack import schema as sl
from nanoclaw.platforms.telegram import schema as tg
from nanoclaw.platforms.whatsapp import schema as wa

TOPS = (tg.Update, ds.Interaction, ds.Message, sl.Envelope, sl.Interaction, wa.Body, wa.Message, mx.Handover,
        sg.Handover)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                               st.sampled_from(["id", "type", "from", "message", "chat", "event", "entry", "changes",
                                                "value", "messages", "author", "channel_id", "envelope", "kind",
                                                "room_id", "update_id", "date", "text", "content", "user"]) | st.text(),
                               inner, max_size=6), max_leaves=30)


def test_numbers_are_read_as_text_where_platforms_send_either_but_never_a_bool():
    message = shapes.read(ds.Message, {"id": 1234567890123, "channel_id": "9", "author": {"id": 42}})
    assert (message.id, message.author.id) == ("1234567890123", "42") and isinstance(message.id, str)
    assert shapes.read(sl.Event, {"type": "message", "ts": 1700000000.25}).ts == "1700000000.25"
    with pytest.raises(shapes.ShapeError) as refused:
        shapes.read(ds.User, {"id": True})
    assert shapes.first_problem(refused.value) == "id: Expected `str`, got `bool`"


def test_the_first_problem_says_what_and_where():
    with pytest.raises(shapes.ShapeError) as chat:
        shapes.read(tg.Update, {"update_id": 1, "message": {"message_id": 2, "date": 3, "chat": "x"}})
    assert shapes.first_problem(chat.value) == "message.chat: Expected `object`, got `str`"
    with pytest.raises(shapes.ShapeError) as deep:
        shapes.read(wa.Body, {"entry": [{"changes": [{"value": {"statuses": [{"id": []}]}}]}]})
    assert shapes.first_problem(deep.value) == "entry.0.changes.0.value.statuses.0.id: Expected `str`, got `list`"


@settings(max_examples=300, deadline=None)
@given(shape=st.sampled_from(TOPS), value=json_values)
def test_any_json_is_read_or_refused_with_a_reason(shape, value):
    try:
        shapes.read(shape, value)
    except shapes.ShapeError as exc:
        assert shapes.first_problem(exc)
