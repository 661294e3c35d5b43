"""Every CLI command: success, and each mistake as one line with exit status 2."""
import pytest

from nanoclaw.models import AgentGroup, AgentGroupMember, AuditLog, MessagingGroup, User, UserRole, Wiring


def one_error_line(result, fragment):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output


# --- agent -----------------------------------------------------------------------------------

def test_agent_create_makes_folder_and_claude_md(cli, app):
    result = cli("agent", "create", "Andy", "--instructions", "Answer in haiku.")
    assert result.exit_code == 0, result.output
    agent = AgentGroup.get(AgentGroup.folder == "andy")
    assert agent.name == "Andy"
    claude_md = app.config["NANOCLAW"].groups_dir / "andy" / "CLAUDE.md"
    assert "Answer in haiku." in claude_md.read_text()
    assert AuditLog.select().where(AuditLog.action == "agent.create").count() == 1


def test_agent_create_with_folder(cli):
    assert cli("agent", "create", "Research Bot", "--folder", "research").exit_code == 0
    assert AgentGroup.get(AgentGroup.folder == "research").name == "Research Bot"


@pytest.mark.parametrize("args, fragment", [
    (["agent", "create", "X", "--folder", "global"], "reserved"),
    (["agent", "create", "X", "--folder", "../up"], "may not contain"),
    (["agent", "create", "X", "--folder", "a/b"], "may not contain"),
    (["agent", "create", "!!!"], "pass --folder"),
    (["agent", "create"], "Missing argument"),
    (["agent", "delete", "ghost"], "no agent with folder 'ghost'"),
    (["agent", "explode"], "No such command"),
])
def test_agent_mistakes(cli, args, fragment):
    one_error_line(cli(*args), fragment)


def test_agent_create_twice_is_refused(cli):
    cli("agent", "create", "Andy")
    one_error_line(cli("agent", "create", "Andy"), "already exists")


def test_agent_list_and_delete(cli, app):
    assert "no agents yet" in cli("agent", "list").output
    cli("agent", "create", "Andy")
    cli("agent", "create", "Bea")
    cli("wire", "telegram", "42", "andy")
    listing = cli("agent", "list").output.splitlines()
    assert listing[0].split() == ["FOLDER", "NAME", "WIRINGS"]
    assert listing[1].split() == ["andy", "Andy", "1"]
    result = cli("agent", "delete", "andy")
    assert result.exit_code == 0 and "is kept" in result.output
    assert not AgentGroup.select().where(AgentGroup.folder == "andy").exists()
    assert Wiring.select().count() == 0
    assert (app.config["NANOCLAW"].groups_dir / "andy").is_dir()
    assert cli("agent", "delete", "bea", "--purge").exit_code == 0
    assert not (app.config["NANOCLAW"].groups_dir / "bea").exists()


# --- user ------------------------------------------------------------------------------------

def test_user_add_roles(cli):
    cli("agent", "create", "Andy")
    assert cli("user", "add", "telegram:42", "--name", "Me", "--role", "owner").exit_code == 0
    assert cli("user", "add", "slack:U1", "--role", "admin", "--agent", "andy").exit_code == 0
    assert cli("user", "add", "slack:U2", "--role", "admin").exit_code == 0
    assert cli("user", "add", "telegram:7", "--agent", "andy").exit_code == 0
    assert User.get_by_id("telegram:42").name == "Me"
    assert UserRole.get(UserRole.user == "telegram:42").role == "owner"
    assert UserRole.get(UserRole.user == "slack:U1").agent_group.folder == "andy"
    assert UserRole.get(UserRole.user == "slack:U2").agent_group is None
    assert AgentGroupMember.get(AgentGroupMember.user == "telegram:7").agent_group.folder == "andy"
    again = cli("user", "add", "telegram:42", "--role", "owner")
    assert again.exit_code == 0 and "updated" in again.output
    assert UserRole.select().where(UserRole.user == "telegram:42").count() == 1


@pytest.mark.parametrize("args, fragment", [
    (["user", "add", "42"], "<channel>:<platform user id>"),
    (["user", "add", "telegram:"], "<channel>:<platform user id>"),
    (["user", "add", "telegram:1", "--role", "member"], "needs --agent"),
    (["user", "add", "telegram:1", "--role", "owner", "--agent", "andy"], "drop --agent"),
    (["user", "add", "telegram:1", "--role", "king"], "'king' is not one of"),
    (["user", "add", "telegram:1", "--agent", "ghost"], "no agent with folder 'ghost'"),
    (["user", "add", "telegarm:1", "--role", "owner"], "'telegarm' (in user id 'telegarm:1') is not a channel name (one of: "),
])
def test_user_mistakes(cli, args, fragment):
    cli("agent", "create", "Andy")
    one_error_line(cli(*args), fragment)
    assert User.select().count() == 0  # nothing stored


# --- wire ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind, mode, pattern", [
    ("dm", "pattern", "."),
    ("group", "mention", None),
    ("thread", "mention-sticky", None),
])
def test_wire_defaults_by_kind(cli, kind, mode, pattern):
    cli("agent", "create", "Andy")
    result = cli("wire", "telegram", "-1001", "andy", "--kind", kind)
    assert result.exit_code == 0, result.output
    wiring = Wiring.get()
    assert (wiring.engage_mode, wiring.engage_pattern) == (mode, pattern)
    assert (wiring.sender_scope, wiring.ignored_message_policy) == ("all", "drop")
    mg = MessagingGroup.get()
    assert (mg.channel_type, mg.platform_id, mg.kind) == ("telegram", "-1001", kind)
    assert mg.unknown_sender_policy == "request_approval"


def test_wire_explicit_settings_and_update(cli):
    cli("agent", "create", "Andy")
    result = cli("wire", "slack", "C1", "andy", "--kind", "group", "--engage", "pattern", "--pattern", "^andy\\b",
                 "--sender-scope", "known", "--ignored", "accumulate", "--unknown-senders", "strict", "--name", "team")
    assert result.exit_code == 0, result.output
    w = Wiring.get()
    assert (w.engage_mode, w.engage_pattern, w.sender_scope, w.ignored_message_policy) == \
        ("pattern", "^andy\\b", "known", "accumulate")
    assert MessagingGroup.get().unknown_sender_policy == "strict"
    again = cli("wire", "slack", "C1", "andy", "--engage", "mention")
    assert again.exit_code == 0 and again.output.startswith("updated")
    assert Wiring.select().count() == 1
    assert Wiring.get().engage_mode == "mention" and Wiring.get().engage_pattern is None


def test_fan_out_two_agents_on_one_chat(cli):
    cli("agent", "create", "Andy")
    cli("agent", "create", "Bea")
    cli("wire", "telegram", "-5", "andy", "--kind", "group")
    cli("wire", "telegram", "-5", "bea", "--engage", "pattern", "--pattern", "bea")
    assert MessagingGroup.select().count() == 1
    assert sorted(w.agent_group.folder for w in Wiring.select()) == ["andy", "bea"]
    # the second wire kept the chat's known kind
    assert MessagingGroup.get().kind == "group"


@pytest.mark.parametrize("args, fragment", [
    (["wire", "telegram", "1", "andy", "--engage", "pattern"], "needs --pattern"),
    (["wire", "telegram", "1", "andy", "--engage", "pattern", "--pattern", "(oops"], "not a valid regular expression"),
    (["wire", "telegram", "1", "andy", "--engage", "mention", "--pattern", "x"], "only applies to --engage pattern"),
    (["wire", "telegram", "1", "ghost"], "no agent with folder 'ghost'"),
    (["wire", "telegram", "1", "andy", "--kind", "channel"], "'channel' is not one of"),
    (["wire", "tele gram", "1", "andy"], "is not a channel name"),
    (["wire", "telegarm", "1", "andy"], "'telegarm' is not a channel name (one of: "),  # a typo wired nothing
    (["wire", "telegram", "1"], "Missing argument"),
    (["unwire", "telegram", "1", "andy"], "is not wired to andy"),
])
def test_wire_mistakes(cli, args, fragment):
    cli("agent", "create", "Andy")
    one_error_line(cli(*args), fragment)
    assert Wiring.select().count() == 0


def test_unwire_and_wirings_table(cli):
    assert "no wirings yet" in cli("wirings").output
    cli("agent", "create", "Andy")
    cli("wire", "telegram", "42", "andy")
    cli("wire", "telegram", "-100", "andy", "--kind", "group")
    table = cli("wirings").output.splitlines()
    assert table[0].split() == ["CHAT", "KIND", "AGENT", "ENGAGE", "SENDERS", "IGNORED", "STRANGERS"]
    assert table[1].split() == ["telegram:-100", "group", "andy", "mention", "all", "drop", "request_approval"]
    assert table[2].split() == ["telegram:42", "dm", "andy", "pattern", ".", "all", "drop", "request_approval"]
    result = cli("unwire", "telegram", "42", "andy")
    assert result.exit_code == 0
    assert [w.messaging_group.platform_id for w in Wiring.select()] == ["-100"]


def test_help_explains(cli):
    result = cli("wire", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "dm -> pattern '.', group -> mention, thread -> mention-sticky" in text
    assert "--sender-scope" in text


def test_model_feature_allow_and_deny_write_the_agents_policy_audited(cli, app):
    """Issue 60, item 4: the owner allows one door feature for one agent; a feature that is not one is
    refused in one line (exit 2), nothing written."""
    from nanoclaw.models import AuditLog
    from nanoclaw.proxy.model_features import FeatureBook
    from nanoclaw.proxy.policy_files import policy_root
    assert cli("agent", "create", "Andy").exit_code == 0
    allowed = cli("model", "feature", "allow", "andy", "web_fetch", "--why", "reads the docs")
    assert allowed.exit_code == 0 and "andy may use: web_fetch" in allowed.output
    book = FeatureBook(policy_root(app.config["NANOCLAW"]))
    assert book.allowed("andy") == {"web_fetch"}
    assert cli("model", "feature", "deny", "andy", "web_fetch").exit_code == 0 and book.allowed("andy") == set()
    wrong = cli("model", "feature", "allow", "andy", "teleport")
    assert wrong.exit_code == 2 and "Traceback" not in wrong.output and "teleport" in wrong.output
    assert [a.action for a in AuditLog.select().where(AuditLog.action.startswith("model.feature"))] == \
        ["model.feature.allow", "model.feature.deny"]
