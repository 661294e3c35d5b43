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
    ({"NANOCLAW_TTS_PRICE_PER_1K_CHARS": "cheap"}, "NANOCLAW_TTS_PRICE_PER_1K_CHARS"),
    ({"NANOCLAW_TTS_PRICE_PER_1K_CHARS": "-1"}, "NANOCLAW_TTS_PRICE_PER_1K_CHARS"),
    ({"NANOCLAW_TTS_PRICE_PER_1K_CHARS": "nan"}, "NANOCLAW_TTS_PRICE_PER_1K_CHARS"),
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


# --- the install's secret key (issue 29, hole 5) -------------------------------------------------

def _first_start(data_dir, barrier, out):
    from nanoclaw.config import local_secret_key
    barrier.wait()
    out.put(local_secret_key(data_dir))


def test_programs_starting_at_once_on_a_first_run_agree_on_one_full_key(tmp_path):
    import multiprocessing
    ctx = multiprocessing.get_context("fork")
    for round_ in range(5):
        data = tmp_path / f"data{round_}"
        data.mkdir()
        barrier, out = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_first_start, args=(data, barrier, out)) for _ in range(6)]
        for p in procs:
            p.start()
        keys = [out.get(timeout=30) for _ in procs]
        for p in procs:
            p.join()
        assert len(set(keys)) == 1 and len(keys[0]) >= 32, keys
        assert (data / "secret_key").read_text() == keys[0]
        assert oct((data / "secret_key").stat().st_mode & 0o777) == "0o600"
        assert [p.name for p in data.iterdir()] == ["secret_key"]  # no temporary file left behind


def test_an_empty_or_short_key_stops_start_up_with_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from nanoclaw.config import PROJECT_ROOT, SettingsError, local_secret_key
    (tmp_path / "secret_key").write_text("")
    with pytest.raises(SettingsError, match="fewer than 32"):
        local_secret_key(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "NANOCLAW_DATA_DIR": str(tmp_path), "NANOCLAW_GROUPS_DIR": str(tmp_path / "g"),
           "NANOCLAW_ENV_FILE": str(tmp_path / "no.env"), "TZ": "UTC"}
    done = subprocess.run([str(Path(sys.executable).parent / "flask"), "--app", "app", "nanoclaw", "agent", "list"],
                          cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "secret_key holds 0 bytes" in done.stderr
    with pytest.raises(SettingsError, match="NANOCLAW_SECRET_KEY holds 5 bytes"):
        Settings.load(environ={"NANOCLAW_SECRET_KEY": "short", "NANOCLAW_DATA_DIR": str(tmp_path)},
                      dotenv_path=tmp_path / "no.env")


def test_a_full_disk_on_the_first_start_never_leaves_an_empty_key(tmp_path):
    """The disk fills between making the key file and writing it: the next start must not take an
    empty key (everything signed with it would be forgeable); once there is room, a full key."""
    from nanoclaw.config import local_secret_key
    from tests.inbound.test_full_disk import fill, small_disk
    with small_disk(tmp_path / "disk", "1m") as disk:
        filler = fill(disk)
        with pytest.raises(OSError):
            local_secret_key(disk)
        assert not (disk / "secret_key").exists()
        filler.unlink()
        key = local_secret_key(disk)
        assert len(key) >= 32 and (disk / "secret_key").read_text() == key
