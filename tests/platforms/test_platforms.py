"""The platform registry: every chat platform is a folder of the same shape that declares itself,
and what the rest of the service needs (settings, secrets, listeners, commands, doctor checks) is
read from the declarations. A platform's secret prefixes are reserved on both sides of the sandbox."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from agent_runner import proposal_rules as runner_rules
from agent_runner.config import RunnerConfig
from nanoclaw import platforms
from nanoclaw import proposal_rules as host_rules
from nanoclaw.channels.base import get_adapter
from nanoclaw.config import Settings
from nanoclaw.sandboxes.manager import build_spec

FOLDER = Path(platforms.__file__).parent
PLATFORMS = platforms.all_platforms()


def test_every_folder_is_a_registered_platform_and_every_platform_a_folder():
    folders = sorted(p.name for p in FOLDER.iterdir() if (p / "__init__.py").exists())
    assert folders == [p.name for p in PLATFORMS] and len(folders) >= 4


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_a_platform_folder_has_the_common_shape(platform):
    files = {p.name for p in (FOLDER / platform.name).glob("*.py")}
    assert {"__init__.py", "adapter.py", "schema.py", "doctor.py"} <= files
    assert ("listener.py" in files) == bool(platform.listeners)
    assert ("commands.py" in files) == bool(platform.commands)
    assert platform.part(platform.doctor)({}) is None  # not configured: nothing to check
    if platform.commands:
        assert platform.part(platform.commands)
    for setting in platform.settings:  # every setting of the platform is covered by its own prefixes
        assert setting.name.startswith(platform.secret_prefixes), setting.name


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_the_adapter_is_found_by_the_platforms_name(platform, tmp_path):
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC"}, dotenv_path=tmp_path / "x")
    adapter = get_adapter(platform.name, settings)
    assert adapter.name == platform.name
    assert type(adapter).__module__ == f"{platform.package}.adapter"


@pytest.mark.parametrize("platform", PLATFORMS, ids=lambda p: p.name)
def test_its_settings_are_read_with_their_defaults(platform, tmp_path):
    values = {s.name: s.example or f"value-of-{s.name.lower()}" for s in platform.settings if s.default is None}
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC", **values},
                             dotenv_path=tmp_path / "x")
    for setting in platform.settings:
        assert settings.platform.get(setting.name) == (values.get(setting.name) or setting.default)
    assert platform.configured(settings.platform)


def test_every_platforms_secret_prefixes_are_reserved_on_both_sides(tmp_path):
    """The host refuses a route or an MCP server asking for a platform's variable, and so does the
    runner in a sandbox the host configured (before: the runner's own list named the platforms, and
    a platform missing from it was a hole)."""
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC"}, dotenv_path=tmp_path / "x")
    spec = build_spec(settings, "andy", "s1")
    runner = RunnerConfig.from_env(spec.env)
    for prefix in platforms.secret_prefixes():
        name = f"{prefix}BOT_TOKEN"
        with pytest.raises(host_rules.RuleError, match="reserved"):
            host_rules.check_secret_name(name)
        with pytest.raises(host_rules.RuleError, match="reserved"):
            host_rules.check_mcp_server("tool", "run", [], [name])
        with pytest.raises(runner_rules.RuleError, match="reserved"):
            runner_rules.check_secret_name(name, runner.reserved_secret_prefixes)
        with pytest.raises(runner_rules.RuleError, match="reserved"):
            runner_rules.check_mcp_server("tool", "run", [], [name], runner.reserved_secret_prefixes)
    assert host_rules.check_secret_name("GITHUB_TOKEN") == "GITHUB_TOKEN"


def test_a_bad_value_of_a_platform_setting_stops_start_up_with_its_line(tmp_path):
    from nanoclaw.config import SettingsError
    with pytest.raises(SettingsError, match="TELEGRAM_MODE='sometimes' is unknown"):
        Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TELEGRAM_MODE": "sometimes"},
                      dotenv_path=tmp_path / "x")


def test_listener_programs_come_from_the_declarations(tmp_path):
    from nanoclaw.supervise import listener_programs
    settings = Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path), "TZ": "UTC",
                                      "TELEGRAM_BOT_TOKEN": "1:a"}, dotenv_path=tmp_path / "x")
    text = listener_programs(settings, Path("/srv/nanoclaw"), Path("/srv/nanoclaw/.venv/bin"))
    sections = {block.split("]")[0].strip("[").split(":")[1]: block for block in text.split("\n\n") if block}
    # only what the settings ask for: an idle section costs every stop of the service a second
    assert set(sections) == {"telegram-poll"}
    assert {l.program for p in PLATFORMS for l in p.listeners} > {"telegram-poll", "slack-socket"}
    assert "command=/srv/nanoclaw/.venv/bin/flask --app app nanoclaw telegram poll" in sections["telegram-poll"]


def test_a_declaration_imports_nothing_heavy():
    """The registry is read by config at every start of every program: the declarations stay light."""
    import subprocess
    import sys
    code = ("import sys; from nanoclaw import platforms; platforms.all_platforms(); "
            "print(sorted(m for m in ('requests', 'pydantic', 'discord', 'slack_sdk', 'flask') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert importlib.import_module("nanoclaw.platforms")
