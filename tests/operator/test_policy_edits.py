"""The operator's own changes to what an agent may reach, from the CLI (the page's are in
test_operator_e2e and test_admin_scope): checked by the tools' rules, written for the proxy,
audited with who, why and the diff; a hand edit of a policy file is audited as one."""
from __future__ import annotations

import json

from nanoclaw.models import AuditLog
from nanoclaw.proxy.policy_files import EGRESS_FILE, ROUTES_FILE, audit_change, group_file, policy_root, read_policy_file


def test_egress_add_list_remove_with_why_and_diff(app, cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    added = cli("egress", "add", "andy", "api.github.com", "--why", "issues")
    assert added.exit_code == 0 and added.output.strip() == "andy may reach api.github.com from its next request"
    assert cli("egress", "add", "andy", "api.github.com").output.strip() == "andy may reach api.github.com already"
    assert "api.github.com" in cli("egress", "list").output
    root = policy_root(app.config["NANOCLAW"])
    assert read_policy_file(group_file(root, "andy", EGRESS_FILE)).as_list() == ["api.github.com"]
    entry = AuditLog.get(AuditLog.action == "egress.add")
    assert (entry.actor, entry.detail["why"], entry.detail["diff"]) == ("cli", "issues", ["+ api.github.com"])
    assert cli("egress", "remove", "andy", "api.github.com").exit_code == 0
    assert read_policy_file(group_file(root, "andy", EGRESS_FILE)).as_list() == []
    assert AuditLog.select().where(AuditLog.action == "egress.add").count() == 1  # the no-op was not audited


def test_bad_input_is_one_line_and_exit_2_and_nothing_written(app, cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    for args, says in ((("egress", "add", "andy", "*.com"), "second-level"),
                       (("egress", "add", "andy", "https://evil.com/x"), "without scheme"),
                       (("egress", "remove", "andy", "nowhere.example"), "is not allowed"),
                       (("egress", "add", "ghost", "a.example"), "no agent"),
                       (("credentials", "add", "andy", "/x/", "http://plain.example", "X_TOKEN"), "https"),
                       (("credentials", "add", "andy", "/x/", "https://x.example", "ANTHROPIC_API_KEY"), "reserved"),
                       (("credentials", "remove", "andy", "/nothing/"), "no credential route")):
        result = cli(*args)
        assert result.exit_code == 2 and says in result.output and len(result.output.strip().splitlines()) == 1, \
            (args, result.output)
    assert not (policy_root(app.config["NANOCLAW"]) / "andy").exists()


def test_credential_routes_by_name_only(app, cli, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret-value-0123456789")
    assert cli("agent", "create", "Andy").exit_code == 0
    assert cli("credentials", "add", "andy", "/github/", "https://api.github.com", "GITHUB_TOKEN",
               "--why", "issues").exit_code == 0
    assert "/github/ -> https://api.github.com" in cli("credentials", "list", "andy").output
    text = group_file(policy_root(app.config["NANOCLAW"]), "andy", ROUTES_FILE).read_text()
    assert "GITHUB_TOKEN" in text and "ghp-secret" not in text
    assert "ghp-secret" not in json.dumps([a.detail for a in AuditLog.select()])
    assert cli("credentials", "remove", "andy", "/github/", "--why", "revoked").exit_code == 0
    assert AuditLog.get(AuditLog.action == "credentials.route_remove").detail["why"] == "revoked"


def test_a_hand_edit_is_audited_as_one_and_our_writes_are_not(app, cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    root = policy_root(app.config["NANOCLAW"])
    assert cli("egress", "add", "andy", "api.github.com").exit_code == 0
    audit_change("andy", EGRESS_FILE, None, read_policy_file(group_file(root, "andy", EGRESS_FILE)), None, root=root)
    assert AuditLog.select().where(AuditLog.action == "policy.reload").count() == 1
    path = group_file(root, "andy", EGRESS_FILE)
    path.write_text(json.dumps({"allow": ["api.github.com", "evil.example"]}))  # an editor, by hand
    audit_change("andy", EGRESS_FILE, None, read_policy_file(path), None, root=root)
    hand = AuditLog.get(AuditLog.action == "policy.hand_edit")
    assert hand.actor == "proxy" and "+ evil.example" in hand.detail["diff"]
