"""`internet set/show/log` (issue 62): what each agent may reach, changed by the one who runs the host,
audited; a mistake gets one line and exit 2."""
from __future__ import annotations


def test_set_show_and_log(cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    shown = cli("internet", "show").output
    assert "andy" in shown and "on" in shown  # created after reading landed: reads any public page
    done = cli("internet", "set", "andy", "--read", "listed", "--why", "docs only")
    assert done.exit_code == 0 and "andy: read listed, search off, browser off" in done.output
    assert "listed" in cli("internet", "show", "andy").output
    assert "nothing read yet" in cli("internet", "log", "andy").output
    from nanoclaw.models import AuditLog
    [entry] = AuditLog.select().where(AuditLog.action == "internet.set")
    assert entry.detail["before"]["read"] == "on" and entry.detail["after"]["read"] == "listed"


def test_mistakes_get_one_line_and_exit_2(cli):
    assert cli("agent", "create", "Andy").exit_code == 0
    for args, said in ((("internet", "set", "nobody", "--read", "on"), "no agent with folder 'nobody'"),
                       (("internet", "set", "andy"), "say what to change"),
                       (("internet", "set", "andy", "--read", "maybe"), "'maybe' is not one of"),
                       (("internet", "log", "andy", "--limit", "0"), "0 is not in the range")):
        result = cli(*args)
        assert result.exit_code == 2, (args, result.output)
        assert said in result.output and "Traceback" not in result.output
