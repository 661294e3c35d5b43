"""`flask --app app nanoclaw signal …`: read the events, run signal-cli's daemon, link the account."""
from __future__ import annotations

import os
import shutil
import signal as signals
import subprocess

import click

from ...cli.base import Mistake, group, settings as current_settings
from . import DEFAULT_URL, configured, host_port, runs_daemon
from .listener import EventsListener

INSTALL = ("signal-cli is not installed. On Debian: install a Java runtime (apt install default-jre-headless), "
           "download the release from https://github.com/AsamK/signal-cli/releases, unpack it to /opt and link "
           "/opt/signal-cli-*/bin/signal-cli into /usr/local/bin.")
NUMBER_OF_ITS_OWN = ("For a number of the bot's own (recommended): signal-cli -a +NUMBER register (add --voice for a "
                     "landline), then signal-cli -a +NUMBER verify CODE with the code Signal sends; put "
                     "SIGNAL_ACCOUNT=+NUMBER in .env.")


def _ready(settings) -> None:
    if not configured(settings.platform):
        raise Mistake("Signal is not set up: put SIGNAL_ACCOUNT=+NUMBER (the bot's number) in .env")


@group("signal")
def signal_cli():
    """Signal through signal-cli's JSON-RPC daemon: events stream in, no public URL needed.

    \b
    Set up: SIGNAL_ACCOUNT=+NUMBER in .env and the number registered or linked in signal-cli
    (`signal link` shows how). When signal-cli is installed here, the listener runs it as its own
    child (nothing that reaches Signal while the listener is down is lost); elsewhere, run its
    daemon yourself (`signal daemon` shows the command) with SIGNAL_CLI_URL pointing at it.
    """


@signal_cli.command("listen")
def listen_command():
    """Hand each event from signal-cli to the web program (supervisord's `signal-events`). With signal-cli
    installed here and SIGNAL_CLI_URL on this machine, this program runs signal-cli itself and answers the
    web program's calls at that URL; otherwise it reads the daemon's events stream at SIGNAL_CLI_URL."""
    settings = current_settings()
    _ready(settings)
    if runs_daemon(settings.platform):
        from .owner import OwnedListener
        listener = OwnedListener(settings)
    else:
        listener = EventsListener(settings)

    for sig in (signals.SIGTERM, signals.SIGINT):
        signals.signal(sig, lambda _sig, _frame: listener.halt())
    listener.run()


@signal_cli.command("daemon")
def daemon_command():
    """Run signal-cli's HTTP daemon for SIGNAL_ACCOUNT on SIGNAL_CLI_URL's port, for a machine where the
    listener does not run it itself (`signal listen` owns signal-cli where both run on one machine)."""
    settings = current_settings()
    _ready(settings)
    found = shutil.which("signal-cli")
    if found is None:
        raise Mistake(INSTALL)
    url = settings.platform.get("SIGNAL_CLI_URL") or DEFAULT_URL
    host, port = host_port(url) or ("127.0.0.1", 8686)
    os.execv(found, [found, "-a", settings.platform["SIGNAL_ACCOUNT"], "daemon", "--http", f"{host}:{port}",
                     "--receive-mode", "on-connection", "--no-receive-stdout"])


@signal_cli.command("link")
@click.option("--name", default="NanoClaw", show_default=True, help="The device name your phone shows.")
def link_command(name: str):
    """Link NanoClaw to an existing Signal account: prints a QR code to scan in the Signal app
    (Settings > Linked devices). Linked to your own account, NanoClaw speaks as you: your DM with it is
    Note to Self. A number of its own is better: see the note this prints."""
    found = shutil.which("signal-cli")
    if found is None:
        raise Mistake(INSTALL + " " + NUMBER_OF_ITS_OWN)
    click.echo(NUMBER_OF_ITS_OWN + "\n")
    click.echo("Warning: linked to your own account, the bot speaks as you, and your Note to Self is its chat.")
    proc = subprocess.Popen([found, "link", "-n", name], stdout=subprocess.PIPE, text=True)
    uri = (proc.stdout.readline() if proc.stdout else "").strip()
    if not uri.startswith("sgnl://linkdevice"):
        proc.kill()
        raise Mistake(f"signal-cli did not print a link ({uri[:80]!r}); run `signal-cli link -n {name}` to see why")
    click.echo(qr_text(uri))
    click.echo(f"{uri}\n\nScan it in Signal on your phone: Settings > Linked devices > Link new device. Waiting…")
    rest = proc.stdout.read() if proc.stdout else ""
    if proc.wait() != 0:
        raise Mistake("the link did not complete; run the command again for a new code")
    click.echo(rest.strip() or "linked")
    click.echo("Put SIGNAL_ACCOUNT=+YOUR_NUMBER in .env and start NanoClaw again.")


def qr_text(uri: str) -> str:
    """The URI as a QR code drawn with block characters (two rows of modules per line)."""
    import io

    import segno
    out = io.StringIO()
    segno.make(uri, error="m").terminal(out=out, compact=True, border=2)
    return out.getvalue()
