"""`doctor`: is this install ready to answer? One line per check, ✓ or ✗ with what to do.

Each check returns a Finding; `doctor` prints them and exits 0 only when none failed. Nothing it
prints holds a secret: tokens go in headers (or in a URL that is never shown), and an
error is reported by its status or exception type, never by a text that could echo a request.
"""
from __future__ import annotations

import shutil
import tempfile
import urllib.request
from pathlib import Path

import click
import requests

from .. import platforms
from ..db import database
from ..inbound import set_aside, transcribe
from ..models import UserRole
from ..proxy.headers import OAUTH_BETA, credential_headers
from ..runtime import bwrap
from ..platforms import Finding
from ..runtime.image import image_source, source_digest
from .base import command, require_schema, settings as current_settings

MIN_FREE_BYTES = 1 << 30   # 1 GiB: sessions, transcripts, images being built
TIMEOUT = (5, 15)


def check_model_key(settings) -> Finding:
    name = "model key"
    if not (settings.anthropic_api_key or settings.claude_code_oauth_token):
        return Finding(False, name, "not set; put ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN) in .env")
    headers = {**credential_headers(settings.anthropic_api_key, settings.claude_code_oauth_token),
               "anthropic-version": "2023-06-01", "content-type": "application/json"}
    if not settings.anthropic_api_key:
        headers["anthropic-beta"] = OAUTH_BETA
    url = settings.anthropic_upstream_url.rstrip("/") + "/v1/messages/count_tokens"  # costs nothing
    try:
        resp = requests.post(url, headers=headers, timeout=TIMEOUT, json={
            "model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "ping"}]})
    except requests.RequestException as exc:
        return Finding(False, name, f"{settings.anthropic_upstream_url} did not answer ({type(exc).__name__}); "
                                    "check the network or ANTHROPIC_UPSTREAM_URL")
    if resp.status_code in (401, 403):
        return Finding(False, name, f"the key was refused ({resp.status_code}); put a valid key in .env")
    if resp.status_code >= 500 or resp.status_code == 429:
        return Finding(False, name, f"{settings.anthropic_upstream_url} answered {resp.status_code}; try again later")
    return Finding(True, name, f"accepted by {settings.anthropic_upstream_url}")


SUBSCRIPTION_NOTE = ("a subscription (OAuth) token may not be allowed by the provider's terms for use outside its own "
                     "apps; an API key (ANTHROPIC_API_KEY) is the supported way")


def check_subscription(settings) -> Finding:
    if not settings.claude_code_oauth_token:
        return Finding(None, "subscription token", "not used")
    if settings.anthropic_api_key:
        return Finding(None, "subscription token", "set, but ANTHROPIC_API_KEY is set too and wins; the token is "
                                                   "not used")
    return Finding(None, "subscription token", f"CLAUDE_CODE_OAUTH_TOKEN is used: {SUBSCRIPTION_NOTE}")


def check_upstreams(settings) -> list[Finding]:
    """Every model upstream answers a one-token request with its credential, with the models agents use
    there (each link of each chain once); an upstream no agent uses is asked with a default model."""
    from ..models import AgentGroup
    from ..operator import models as ops
    from ..proxy.upstream_probe import probe
    try:
        found = ops.upstreams(settings)
    except ops.ModelRefused as exc:
        return [Finding(False, "model upstreams", f"{exc}; fix data/policy/upstreams.json or re-add them")]
    links: dict[tuple[str, str], list[str]] = {}
    try:
        with database.connection_context():
            agents = list(AgentGroup.select().order_by(AgentGroup.folder))
            for agent in agents:
                try:
                    choice = ops.current(settings, agent)
                except ops.ModelRefused as exc:
                    return [Finding(False, f"model of {agent.folder}", f"{exc}; set it again with `model set`")]
                for link in choice.chain if choice else ():
                    links.setdefault((link.upstream, link.model), []).append(agent.folder)
    except Exception:  # noqa: BLE001 - no database yet: the upstreams alone
        pass
    for name in found:
        if not any(up == name for up, _m in links):
            links[(name, "claude-haiku-4-5")] = []
    out = []
    for (upstream, model), users in sorted(links.items()):
        if upstream == "anthropic":
            continue  # the model key line asks it
        ok, detail = probe(settings, upstream, model)
        who = f" (used by {', '.join(users)})" if users else ""
        out.append(Finding(ok, f"upstream {upstream}", f"{detail}{who}" if ok else
                           f"{detail}{who}; fix it, then `flask --app app nanoclaw upstream test {upstream}`"))
    return out


def check_runtime(settings) -> list[Finding]:
    """The runtime NANOCLAW_RUNTIME picks, checked by making a sandbox; and the agent image."""
    found: list[Finding] = []
    if settings.runtime == "kubernetes":
        return [check_cluster(settings)]
    from ..runtime import docker as docker_rt  # a bwrap install never loads the SDK (issue 43)
    client, where = (docker_rt.connect() if settings.runtime in ("docker", "auto") else (None, ""))
    if client is not None:
        built_from = image_source(settings, client=client)
        if built_from is None:
            found.append(Finding(False, "agent image", f"{settings.agent_image} is missing; build it with "
                                                       "`flask --app app nanoclaw image build`"))
        elif built_from != source_digest():
            found.append(Finding(False, "agent image", f"{settings.agent_image} was built from other sources; "
                                                       "rebuild it with `flask --app app nanoclaw image build`"))
        else:
            found.append(Finding(True, "agent image", f"{settings.agent_image} is current"))
        try:
            client.containers.run(settings.agent_image, ["true"], network_mode="none", remove=True)
            found.append(Finding(True, "sandbox", f"docker started a sandbox (engine at {where})"))
            return found
        except Exception as exc:
            found.append(Finding(False, "sandbox", f"docker could not start a sandbox ({type(exc).__name__})"))
            if settings.runtime == "docker":
                return found
    elif settings.runtime == "docker":
        return [Finding(False, "sandbox", f"NANOCLAW_RUNTIME=docker but no Docker engine answers ({where}); "
                                          "start one or set NANOCLAW_RUNTIME=auto")]
    problem = bwrap.probe()
    if problem is None:
        found.append(Finding(True, "sandbox", "bubblewrap started a sandbox"))
    else:
        found.append(Finding(False, "sandbox", f"bubblewrap cannot make a sandbox ({problem}); install it with "
                                               "`sudo scripts/install-sandboxes.sh bwrap`, or install Docker"))
    return found


def remote_gaps(agents: dict[str, dict], skilled: set[str] = frozenset()) -> list[str]:
    """What the agents' sandboxes would lack on another machine (pure): extra mounts, refused there
    (approved packages come through the door), skills, not offered there. `agents`: folder ->
    container_config; `skilled`: the folders with skills."""
    return ([f"{folder}: its extra mounts (its sandboxes are refused)" for folder in sorted(agents)
             if (agents.get(folder) or {}).get("mounts")]
            + [f"{folder}: its skills (not offered there)" for folder in sorted(skilled)])


def check_remote_sandboxes(settings) -> Finding | None:
    """On another machine (Kubernetes, a remote engine), what an agent has here that its sandbox would
    not (None when sandboxes run here)."""
    import os

    from ..models import AgentGroup
    from ..runtime.select import session_transport
    cluster = settings.runtime == "kubernetes"
    if not cluster and not (settings.runtime in ("docker", "auto") and
                            session_transport(settings.session_transport, os.environ.get("DOCKER_HOST")) == "network"):
        return None
    with database.connection_context():
        agents = {a.folder: a.container_config or {} for a in AgentGroup.select(AgentGroup.folder,
                                                                               AgentGroup.container_config)}
        from ..operator.skill_store import InstalledSkill
        skilled = {s.agent_group.folder for s in InstalledSkill.select().join(AgentGroup)}
    gaps = remote_gaps(agents, skilled)
    if not gaps:
        return Finding(True, "remote sandboxes", "every agent's sandbox has here what it has on this machine")
    return Finding(False, "remote sandboxes", "not available on another machine yet: " + "; ".join(gaps) +
                   ". Remove them, or run those agents' sandboxes here (NANOCLAW_SESSION_TRANSPORT=files)")


def check_cluster(settings) -> Finding:
    """NANOCLAW_RUNTIME=kubernetes: the cluster answers and lets this service manage pods in its namespace."""
    from ..runtime import kubernetes as k8s
    if not settings.door_listen:
        return Finding(False, "sandbox", "pods reach their sessions through the door: set NANOCLAW_DOOR_LISTEN and "
                                         "NANOCLAW_DOOR_URL (docs/scale.md)")
    try:
        client = k8s.connect(settings.k8s_namespace)
    except Exception as exc:  # noqa: BLE001 - a doctor line, never a traceback
        return Finding(False, "sandbox", f"no usable kubeconfig ({type(exc).__name__}); set KUBECONFIG or run in "
                                         "the cluster with a service account")
    ok, detail = k8s.check_access(client, settings.k8s_namespace)
    if ok:
        detail += ("; the pods' only way out is the NetworkPolicy of deploy/kubernetes/networkpolicy.yaml, which "
                   "needs a CNI that enforces it (Calico, Cilium, Antrea; flannel alone and kindnet accept it and do "
                   "nothing): check yours")
    return Finding(ok, "sandbox", f"kubernetes: {detail}")


def check_data_dir(settings) -> Finding:
    path = Path(settings.data_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Finding(False, "data folder", f"{path} is not writable ({exc.strerror}); fix its owner or "
                                             "NANOCLAW_DATA_DIR")
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        return Finding(False, "data folder", f"only {free >> 20} MiB free under {path}; free some space")
    return Finding(True, "data folder", f"{path} is writable, {free >> 30} GiB free")


def check_timezone(settings) -> Finding:
    return Finding(True, "timezone", f"{settings.timezone}")


def expected_programs(platform: dict) -> list[str]:
    """The supervisord programs this configuration starts (as nanoclaw.supervise decides)."""
    return ["web", "proxy"] + [listener.program for p in platforms.all_platforms() for listener in p.listeners
                               if listener.wanted(platform)]


def program_states(settings) -> dict[str, str] | None:
    """name → supervisord state (RUNNING, BACKOFF, …), asked over supervisord's socket; None when
    no supervisord answers there."""
    import xmlrpc.client

    from supervisor.xmlrpc import SupervisorTransport
    sock = Path(settings.data_dir) / "supervisor.sock"
    if not sock.exists():
        return None
    transport = SupervisorTransport(None, None, serverurl=f"unix://{sock}")
    try:
        info = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport).supervisor.getAllProcessInfo()
    except (OSError, xmlrpc.client.Error):
        return None
    return {p["name"]: p["statename"] for p in info}


def check_programs(settings) -> Finding:
    states = program_states(settings)
    if states is None:
        return Finding(False, "service", "supervisord does not answer; start the service with `make run`")
    wanted = expected_programs(settings.platform)
    down = [f"{name} ({states.get(name, 'missing')})" for name in wanted
            if states.get(name) not in ("RUNNING", "STARTING")]  # STARTING: its first seconds
    if down:
        return Finding(False, "service", f"not running: {', '.join(down)}; see {settings.data_dir}/logs")
    return Finding(True, "service", f"running: {', '.join(wanted)}")


def check_service(settings) -> Finding:
    programs = check_programs(settings)
    if programs.ok is False and "supervisord does not answer" not in programs.detail:
        return programs
    url = f"http://127.0.0.1:{settings.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            healthy = resp.status == 200
    except OSError:
        healthy = False
    if not healthy:
        return Finding(False, "service", f"nothing healthy answers {url}; start it with `make run`")
    if programs.ok:
        return Finding(True, "service", f"{programs.detail}; healthy on port {settings.port}")
    return Finding(True, "service", f"healthy on port {settings.port}")


def check_owner() -> Finding:
    try:
        owner = UserRole.select().where(UserRole.role == "owner").first()
    except Exception:
        return Finding(False, "owner", "the database is not ready; run `flask --app app nanoclaw migrate`")
    if owner is None:
        return Finding(False, "owner", "nobody owns this install; run `flask --app app nanoclaw pair` and send "
                                       "the code to your bot")
    return Finding(True, "owner", owner.user_id)


def check_set_aside() -> Finding | None:
    """Events a listener stopped offering (a running web program refused each five times in a row)."""
    try:
        rows = set_aside.open_ones(limit=1000)
    except Exception:
        return None  # the database is not ready: check_owner says so
    if not rows:
        return None
    latest = rows[0]
    return Finding(False, "set-aside events", f"{len(rows)} event(s) were never answered (latest: {latest.channel} "
                                              f"{latest.event_key}, refused {latest.reason}); the page's \"Waiting "
                                              "on you\" shows them, and the log has the traceback: dismiss them there")


def check_transcriber(settings) -> Finding:
    ok, detail = transcribe.check(settings)
    return Finding(ok, "voice notes", detail)


def check_speech(settings) -> Finding:
    from ..outbound import voice
    ok, detail = voice.check(settings)
    return Finding(ok, "voice answers", detail)


def check_search(settings, spend: bool) -> Finding:
    """Whether the agents' web_search can work: the provider and its key; with `spend`, one real query
    (priced like an agent's, under the name "(doctor)" in the spend)."""
    from ..proxy.host_secrets import HostSecrets
    from ..reading.search import KEYS, SearchFailed, search
    if settings.search == "none":
        return Finding(None, "web search", "no provider (NANOCLAW_SEARCH=none): agents are offered no search tool")
    key = HostSecrets()(KEYS[settings.search]) if settings.search in KEYS else None
    if settings.search in KEYS and not key:
        return Finding(False, "web search", f"{settings.search} needs its key: set {KEYS[settings.search]} in .env")
    if settings.search == "searxng" and not settings.search_url:
        return Finding(False, "web search", "searxng needs NANOCLAW_SEARCH_URL (the instance's address)")
    if not spend:
        return Finding(True, "web search", f"{settings.search} is set up (doctor --search makes one query to check it)")
    try:
        found = search(settings.search, settings.search_url, key, "NanoClaw", 3)
    except SearchFailed as exc:
        return Finding(False, "web search", str(exc))
    if settings.search_price:
        from ..usage import ledger
        with database.connection_context():
            ledger.record_search("(doctor)", "", settings.search, settings.search_price, ledger.today(settings.timezone))
    return Finding(True, "web search", f"{settings.search} answered one query with {len(found)} result(s)"
                   + (f" (USD {settings.search_price:g}, counted as \"(doctor)\")" if settings.search_price else ""))


def check_browser(settings) -> Finding:
    """Where the agents' browser runs; when an agent has it on, one real blank page in its sandbox."""
    import subprocess
    import sys

    from ..reading.browser_sandbox import where
    from ..reading.tables import AgentInternet
    if settings.browsers < 1:
        return Finding(None, "browser", "turned off on this host (NANOCLAW_BROWSERS=0)")
    with database.connection_context():
        used = AgentInternet.select().where(AgentInternet.browser == "on").count()
    sandbox = where(settings)
    if isinstance(sandbox, str):
        return Finding(False if used else None, "browser", sandbox + ("" if used else " (no agent has it on)"))
    if not used:
        return Finding(None, "browser", f"would run in {sandbox.kind} (no agent has it on: internet set --browser on)")
    try:
        out = subprocess.run([sys.executable, "-m", "nanoclaw.reading.browser", "--check", *sandbox.worker_args()],
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return Finding(False, "browser", "Chromium did not open a blank page within 120 s")
    said = (out.stdout.strip().splitlines() or [f"the check ended with {out.returncode}"])[-1]
    return Finding(out.returncode == 0, "browser", said)


def check_git() -> Finding:
    import shutil
    if shutil.which("git"):
        return Finding(True, "git", "found (skill add from a repository)")
    return Finding(None, "git", "not installed: skill add takes folders and archives only (apt-get install git)")


def findings(settings, *, service: bool = True, search: bool = False) -> list[Finding]:
    found = [check_model_key(settings), check_subscription(settings), *check_upstreams(settings),
             *check_runtime(settings), check_data_dir(settings), check_timezone(settings), check_transcriber(settings),
             check_speech(settings), check_search(settings, search), check_browser(settings), check_git()]
    remote = check_remote_sandboxes(settings)
    if remote is not None:
        found.append(remote)
    for platform in platforms.all_platforms():
        if platform.doctor:
            found.extend(f for f in [platform.part(platform.doctor)(settings.platform)] if f is not None)
    if service:
        found.append(check_service(settings))
    with database.connection_context():
        found.append(check_owner())
        found.extend(f for f in [check_set_aside()] if f is not None)
    return found


@command("doctor")
@click.option("--no-service", is_flag=True, help="Do not check that the service is running.")
@click.option("--search", is_flag=True, help="Make one real web search through the provider (it may cost a query).")
def doctor_cmd(no_service, search):
    """Check that this install can answer: model key, model upstreams and the agents' models, sandbox, image,
    data folder, time zone, each configured platform's token, the speech-to-text service, web search, the browser (a
    blank page in its sandbox when an agent has it on), the running
    service and an owner; with sandboxes on another machine, what an agent has here that they would lack. Exit 0 when nothing
    failed."""
    require_schema()  # an install not migrated yet is told so in one line, not with a traceback
    results = findings(current_settings(), service=not no_service, search=search)
    for finding in results:
        click.echo(finding.line())
    failed = [f for f in results if f.ok is False]
    if failed:
        click.echo(f"{len(failed)} problem(s); fix the lines marked ✗ and run doctor again")
        raise SystemExit(1)
    click.echo("all good")
