"""/clear and /compact from an admin reach the SDK as its own commands (real sandbox, real CLI)."""
import json
import re

from tests.web.test_chat_e2e import e2e, runtime_name  # noqa: F401  (fixtures)


def remembers_4711(request) -> bool:
    """The number in the conversation sent to the model (as a word: the request's metadata carries
    random hex ids, one of which once contained the digits)."""
    return re.search(r"\b4711\b", json.dumps(request.messages)) is not None


def test_clear_starts_a_fresh_conversation(e2e):  # noqa: F811
    run, model = e2e
    run("user", "add", "cli:owner", "--role", "owner")  # the local chat sends as this owner
    assert run("chat", "andy", "remember the number 4711", "--timeout", "120").exit_code == 0
    assert run("chat", "andy", "still there?", "--timeout", "120").exit_code == 0
    assert remembers_4711(model.model_calls()[-1])  # the conversation carries on
    result = run("chat", "andy", "/clear", "--timeout", "120")
    assert result.exit_code == 0, result.output
    assert "cleared" in result.output.lower()
    assert run("chat", "andy", "what was the number?", "--timeout", "120").exit_code == 0
    assert not remembers_4711(model.model_calls()[-1])


def test_compact_is_run_by_the_sdk(e2e):  # noqa: F811
    run, model = e2e
    run("user", "add", "cli:owner", "--role", "owner")
    assert run("chat", "andy", "remember the number 4711", "--timeout", "120").exit_code == 0
    before = len(model.model_calls())
    result = run("chat", "andy", "/compact", "--timeout", "120")
    assert result.exit_code == 0, result.output
    calls = model.model_calls()[before:]
    # the CLI asks the model for a summary itself; our formatted <messages> prompt is not sent
    assert calls and all("<messages>" not in c.current_prompt() for c in calls)
