"""Settings: defaults, .env, TIMEZONE resolution, and one-line errors for bad values."""
import subprocess
import sys

import pytest

from nanoclaw.config import PROJECT_ROOT, Settings, SettingsError, resolve_timezone


def load(tmp_path, env=None, dotenv=None):
    env_file = tmp_path / ".env"
    if dotenv is not None:
        env_file.write_text(dotenv)
    return Settings.load(environ={"NANOCLAW_DATA_DIR": str(tmp_path / "d"), **(env or {})}, dotenv_path=env_file)


def test_defaults(tmp_path):
    s = load(tmp_path, {"TZ": "UTC"})
    assert s.port == 8080
    assert s.runtime == "auto"
    assert s.assistant_name == "Andy"
    assert s.max_concurrent_containers == 5
    assert s.max_messages_per_prompt == 10
    assert s.database_url == f"sqlite:///{tmp_path / 'd' / 'nanoclaw.db'}"
    assert s.anthropic_upstream_url == "https://api.anthropic.com"
    assert s.platform["TELEGRAM_API_BASE"] == "https://api.telegram.org"
    assert s.platform["SLACK_API_BASE"] == "https://slack.com/api"
    assert s.platform["WHATSAPP_API_BASE"] == "https://graph.facebook.com/v21.0"
    assert s.platform["DISCORD_API_BASE"] == "https://discord.com/api/v10"


def test_dotenv_is_read_and_environment_wins(tmp_path):
    s = load(tmp_path, {"NANOCLAW_PORT": "9000", "TZ": "UTC"},
             "NANOCLAW_PORT=7000\nNANOCLAW_ASSISTANT_NAME=Bea\nTELEGRAM_BOT_TOKEN=123:abc\n")
    assert s.port == 9000
    assert s.assistant_name == "Bea"
    assert s.platform["TELEGRAM_BOT_TOKEN"] == "123:abc"


@pytest.mark.parametrize("env, variable", [
    ({"NANOCLAW_PORT": "abc"}, "NANOCLAW_PORT"),
    ({"NANOCLAW_PORT": "70000"}, "NANOCLAW_PORT"),
    ({"NANOCLAW_RUNTIME": "podman"}, "NANOCLAW_RUNTIME"),
    ({"TZ": "Mars/Olympus"}, "TZ"),
    ({"TZ": "IST-2"}, "TZ"),
    ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL"),
    ({"DATABASE_URL": "postgresql://"}, "DATABASE_URL"),
    ({"DATABASE_URL": "sqlite://relative.db"}, "DATABASE_URL"),
    ({"MAX_CONCURRENT_CONTAINERS": "0"}, "MAX_CONCURRENT_CONTAINERS"),
    ({"MAX_MESSAGES_PER_PROMPT": "ten"}, "MAX_MESSAGES_PER_PROMPT"),
    ({"ANTHROPIC_UPSTREAM_URL": "api.anthropic.com"}, "ANTHROPIC_UPSTREAM_URL"),
    ({"TELEGRAM_API_BASE": "ftp://x"}, "TELEGRAM_API_BASE"),
])
def test_invalid_value_names_the_variable(tmp_path, env, variable):
    with pytest.raises(SettingsError) as info:
        load(tmp_path, {"TZ": "UTC", **env})
    message = str(info.value)
    assert message.startswith(variable) and "\n" not in message
    assert "accepts" in message or "use a name like" in message


def test_timezone_order_env_then_dotenv_then_system_then_utc(monkeypatch):
    assert resolve_timezone("Asia/Tokyo", "Europe/Berlin") == "Asia/Tokyo"
    assert resolve_timezone(None, "Europe/Berlin") == "Europe/Berlin"
    monkeypatch.setattr("nanoclaw.config.system_timezone", lambda: "America/New_York")
    assert resolve_timezone(None, None) == "America/New_York"
    monkeypatch.setattr("nanoclaw.config.system_timezone", lambda: None)
    assert resolve_timezone(None, None) == "UTC"


def test_dotenv_timezone_is_validated_too(tmp_path):
    with pytest.raises(SettingsError, match=r"TZ \(in \.env\)"):
        load(tmp_path, {}, "TZ=Not/AZone\n")


def test_bad_setting_stops_the_cli_with_one_line(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "NANOCLAW_DATA_DIR": str(tmp_path), "NANOCLAW_PORT": "eighty",
           "NANOCLAW_ENV_FILE": str(tmp_path / "none.env")}
    out = subprocess.run([sys.executable, "-m", "flask", "--app", "app", "nanoclaw", "agent", "list"],
                         cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert lines == ["nanoclaw: cannot start: NANOCLAW_PORT='eighty' is not a number; "
                     "it accepts a whole number from 1 to 65535"]
    assert "Traceback" not in out.stdout + out.stderr
