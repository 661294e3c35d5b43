"""Build the agent image: a Debian base made by debootstrap (no Docker Hub needed), then
container/Dockerfile with claude-agent-sdk + mcp pinned by requirements.txt.

The build context is assembled in a temporary folder so only what the image needs is sent:
Dockerfile, constraints.txt (= requirements.txt: the image gets the host's versions),
build-ca/ca.crt (only when an extra CA bundle is given, e.g. behind an intercepting proxy)
and agent_runner/ (a fallback copy; at run time the live code is bind-mounted).
"""
from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..config import PROJECT_ROOT

# The docker SDK (and .docker, which loads it) is imported in the functions that talk to an
# engine: the web program imports this module for names and digests, and a bwrap install never
# loads the SDK (1.7 MiB resident).

log = logging.getLogger("nanoclaw.runtime.image")

BASE_IMAGE = "nanoclaw-debian-base:bookworm"
SUITE = "bookworm"
FALLBACK_MIRROR = "http://deb.debian.org/debian"
DOCKERFILE = PROJECT_ROOT / "container" / "Dockerfile"
RUNNER_DIR = PROJECT_ROOT / "container" / "agent_runner"
REQUIREMENTS = PROJECT_ROOT / "requirements.txt"
BASE_SCRIPT = PROJECT_ROOT / "scripts" / "debian-base.sh"
AGENT_PACKAGES = "claude-agent-sdk mcp pillow pillow-heif pypdf"  # pictures decoded, PDF pages counted in the sandbox (agent_runner/media.py)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class ImageBuildError(RuntimeError):
    """The build failed; str() carries the builder's last words."""


# --- the host's Debian mirror (pure parsing + one reader) -------------------------------

def mirror_from_sources(one_line: str, deb822: list[str], suite: str = SUITE) -> str | None:
    """The first `deb` URI that serves `suite` itself (not -security/-updates), from apt sources.

    one_line: the classic format (`deb [opts] URI SUITE COMPONENTS…`); deb822: `.sources` texts.
    """
    for line in one_line.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
        if m and m.group(2) == suite:
            return m.group(1).rstrip("/")
    for text in deb822:
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            for raw in stanza.splitlines():
                if raw.startswith("#") or ":" not in raw:
                    continue
                key, _, value = raw.partition(":")
                fields[key.strip().lower()] = value.strip()
            if fields.get("enabled", "yes").lower() == "no":
                continue
            if "deb" in fields.get("types", "").split() and suite in fields.get("suites", "").split():
                uris = fields.get("uris", "").split()
                if uris:
                    return uris[0].rstrip("/")
    return None


def host_apt_mirror(etc_apt: Path = Path("/etc/apt")) -> str:
    def read(p: Path) -> str:
        try:
            return p.read_text()
        except OSError:
            return ""
    listd = etc_apt / "sources.list.d"
    one_line = read(etc_apt / "sources.list") + "\n" + "\n".join(read(p) for p in sorted(listd.glob("*.list")))
    deb822 = [read(p) for p in sorted(listd.glob("*.sources"))]
    return mirror_from_sources(one_line, deb822) or FALLBACK_MIRROR


# --- images ------------------------------------------------------------------------------

def _client(client=None):
    if client is not None:
        return client
    from .docker import connect
    found, where = connect()
    if found is None:
        raise ImageBuildError(f"no Docker engine answers ({where}); start one with scripts/docker-engine.sh start "
                              "and set DOCKER_HOST=unix:///run/nanoclaw-docker/docker.sock")
    return found


def _has_image(client, name: str) -> bool:
    from docker.errors import ImageNotFound
    try:
        client.images.get(name)
        return True
    except ImageNotFound:
        return False


def image_exists(settings, *, client=None) -> bool:
    return _has_image(_client(client), settings.agent_image)


SOURCE_LABEL = "nanoclaw.source"


def source_digest() -> str:
    """A digest of what the agent image is built from (Dockerfile, pinned requirements, the runner,
    the packages): an image whose label differs was built from other sources."""
    h = hashlib.sha256(f"{BASE_IMAGE}\n{AGENT_PACKAGES}\n".encode())
    files = [DOCKERFILE, REQUIREMENTS] + sorted(p for p in RUNNER_DIR.rglob("*")
                                                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    for path in files:
        h.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def image_source(settings, *, client=None) -> str | None:
    """The source digest the agent image was built from (None: no such image, or built without one)."""
    from docker.errors import ImageNotFound
    try:
        image = _client(client).images.get(settings.agent_image)
    except ImageNotFound:
        return None
    return (image.labels or {}).get(SOURCE_LABEL, "")


def build_base(client, progress: Callable[[str], None], *, name: str = BASE_IMAGE, mirror: str | None = None) -> None:
    """debootstrap a minimal bookworm and import it (scripts/debian-base.sh)."""
    mirror = mirror or host_apt_mirror()
    progress(f"building the base image {name} with debootstrap from {mirror} (about a minute)")
    env = {**os.environ, "DOCKER_HOST": _docker_host_of(client)}
    proc = subprocess.Popen([str(BASE_SCRIPT), name, mirror, SUITE], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-20:]
        progress(line)
    if proc.wait() != 0:
        raise ImageBuildError(f"building the base image failed (exit {proc.returncode}):\n" + "\n".join(tail))


def _docker_host_of(client) -> str:
    """The DOCKER_HOST a CLI needs to reach the same engine as `client`."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    url = client.api.base_url
    if url.startswith("http+docker://"):  # a unix socket; the SDK hides which one
        adapter = client.api.get_adapter(url)
        path = getattr(adapter, "socket_path", None)
        from .docker import DEFAULT_ENGINE
        return f"unix://{path}" if path else DEFAULT_ENGINE
    return url


def make_context(dest: Path, ca_bundle: Path | None) -> None:
    shutil.copy(DOCKERFILE, dest / "Dockerfile")
    shutil.copy(REQUIREMENTS, dest / "constraints.txt")
    (dest / "build-ca").mkdir()
    if ca_bundle is not None:
        text = Path(ca_bundle).read_text(errors="replace")
        if "BEGIN CERTIFICATE" not in text:
            raise ImageBuildError(f"{ca_bundle} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        (dest / "build-ca" / "ca.crt").write_text(text)
    shutil.copytree(RUNNER_DIR, dest / "agent_runner", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build_proxy_args() -> dict[str, str]:
    """$NANOCLAW_BUILD_PROXY as the proxy variables a build's package managers read (apt, pip, npm:
    a machine, or an engine on another one, that reaches the registries only through a proxy).
    Docker's own proxy arguments: they are not kept in the image or its history."""
    proxy = os.environ.get("NANOCLAW_BUILD_PROXY", "").strip()
    if not proxy:
        return {}
    return {name: proxy for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}


def run_build(client, progress: Callable[[str], None], **build) -> None:
    """One `docker build` (never pulling) on the engine `client` talks to, through its API, its
    output as progress lines; ImageBuildError with the builder's last 20 lines when it fails."""
    last: list[str] = []
    build["buildargs"] = {**(build.get("buildargs") or {}), **build_proxy_args()}
    for chunk in client.api.build(rm=True, forcerm=True, pull=False, network_mode="host", decode=True, **build):
        if "error" in chunk:
            raise ImageBuildError(f"docker build failed: {chunk['error'].strip()}\n" + "\n".join(last))
        text = ANSI.sub("", chunk.get("stream") or chunk.get("status") or "")
        for line in text.splitlines():
            if line.strip():
                last = (last + [line])[-20:]
                progress(line)


def build_image(settings, *, ca_bundle: Path | None = None, progress: Callable[[str], None] = print,
                client=None) -> dict[str, float]:
    """Build settings.agent_image (and the base first if missing). Returns seconds per stage.

    The build step uses the host network (an engine started with --bridge=none has no other),
    only to reach PyPI; the agent containers themselves always run with network "none".
    """
    client = _client(client)
    timings: dict[str, float] = {}
    if not _has_image(client, BASE_IMAGE):
        started = time.monotonic()
        build_base(client, progress)
        timings["base"] = time.monotonic() - started
    started = time.monotonic()
    progress(f"building {settings.agent_image} from container/Dockerfile"
             + (f" trusting the CA bundle {ca_bundle} for the build" if ca_bundle else ""))
    with tempfile.TemporaryDirectory(prefix="nanoclaw-image-") as ctx:
        make_context(Path(ctx), ca_bundle)
        run_build(client, progress, path=ctx, tag=settings.agent_image, labels={SOURCE_LABEL: source_digest()},
                  buildargs={"BASE_IMAGE": BASE_IMAGE, "AGENT_PACKAGES": AGENT_PACKAGES})
    timings["image"] = time.monotonic() - started
    progress(f"built {settings.agent_image} in {timings['image']:.0f}s")
    return timings


# --- per-agent-group images: the agent image plus the packages the owner approved ---------------

GROUP_IMAGE_PREFIX = "nanoclaw-agent-"
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def group_image_repo(folder: str) -> str:
    return GROUP_IMAGE_PREFIX + (re.sub(r"[^a-z0-9_.-]", "-", folder.lower()).strip("-._") or "group")


def group_image_tag(base_id: str, folder: str, apt: list[str], npm: list[str], repo: str | None = None) -> str:
    """A tag that names exactly what is in the image: the same packages on the same base image (by
    its id, so a rebuilt base gives new group images too) give the same tag and are built once."""
    import hashlib
    import json
    key = json.dumps({"base": base_id, "apt": sorted(set(apt)), "npm": sorted(set(npm))}, sort_keys=True)
    return f"{repo or group_image_repo(folder)}:{hashlib.sha256(key.encode()).hexdigest()[:12]}"


# The browser's image (Chromium in a sandbox of its own, reading/browser_sandbox.py): the agent image
# plus Debian's Chromium; a repository of its own, so no agent's image pruning touches it.
BROWSER_REPO = "nanoclaw-browser"
BROWSER_PACKAGES = ["chromium", "fonts-dejavu-core"]


def browser_image(settings, *, client=None) -> str | None:
    """The browser image's tag when it is built on this engine (for the current agent image), else None."""
    from docker.errors import ImageNotFound
    client = _client(client)
    try:
        base_id = client.images.get(settings.agent_image).id
    except ImageNotFound:
        return None
    tag = group_image_tag(base_id, "", BROWSER_PACKAGES, [], repo=BROWSER_REPO)
    return tag if _has_image(client, tag) else None


def group_dockerfile(base: str, apt: list[str], npm: list[str], *, with_ca: bool) -> str:
    """Package names were checked by regex on both sides; they are quoted here anyway."""
    import shlex
    apt = sorted(set(apt) | ({"nodejs", "npm"} if npm else set()))
    ca_apt = "-o Acquire::https::CaInfo=/tmp/build-ca/ca.crt " if with_ca else ""
    lines = [f"FROM {base}", "USER root", "COPY build-ca/ /tmp/build-ca/"]
    if apt:
        lines.append("RUN set -eu; export DEBIAN_FRONTEND=noninteractive; "
                     f"apt-get {ca_apt}update; apt-get {ca_apt}install -y --no-install-recommends "
                     + " ".join(shlex.quote(p) for p in apt) + "; rm -rf /var/lib/apt/lists/*")
    if npm:
        ca_env = "export NODE_EXTRA_CA_CERTS=/tmp/build-ca/ca.crt; " if with_ca else ""
        lines.append(f"RUN set -eu; {ca_env}npm install -g --no-audit --no-fund "
                     + " ".join(shlex.quote(p) for p in npm) + "; npm cache clean --force")
    lines += ["RUN rm -rf /tmp/build-ca", "USER 1000:1000"]
    return "\n".join(lines) + "\n"


def build_ca_bundle() -> Path | None:
    """The CAs a build trusts by default: $NANOCLAW_BUILD_CA_BUNDLE, else the host's system bundle
    (a machine behind a TLS-inspecting proxy trusts it there); NANOCLAW_BUILD_CA_BUNDLE="" for none."""
    configured = os.environ.get("NANOCLAW_BUILD_CA_BUNDLE")
    if configured:
        return Path(configured)
    return SYSTEM_CA if configured is None and SYSTEM_CA.is_file() else None


def build_group_image(settings, folder: str, apt: list[str], npm: list[str], *, ca_bundle: Path | None = None,
                      progress: Callable[[str], None] = print, client=None, repo: str | None = None) -> str:
    """Build (unless it exists) the group's image on top of settings.agent_image; returns its tag.

    ca_bundle: trusted during the build only (apt over https, npm), e.g. behind an intercepting
    proxy; by default $NANOCLAW_BUILD_CA_BUNDLE, else the host's own system bundle."""
    from docker.errors import ImageNotFound
    client = _client(client)
    try:
        base_id = client.images.get(settings.agent_image).id
    except ImageNotFound:
        raise ImageBuildError(f"no base image {settings.agent_image}; build it first: "
                              "flask --app app nanoclaw image build") from None
    tag = group_image_tag(base_id, folder, apt, npm, repo)
    if _has_image(client, tag):
        progress(f"{tag} exists already")
        return tag
    if ca_bundle is None:
        ca_bundle = build_ca_bundle()
    started = time.monotonic()
    progress(f"building {tag}: {settings.agent_image} + apt {' '.join(apt) or '-'} + npm {' '.join(npm) or '-'}")
    with tempfile.TemporaryDirectory(prefix="nanoclaw-group-image-") as ctx:
        (Path(ctx) / "build-ca").mkdir()
        if ca_bundle is not None:
            shutil.copy(ca_bundle, Path(ctx) / "build-ca" / "ca.crt")
        (Path(ctx) / "Dockerfile").write_text(group_dockerfile(settings.agent_image, apt, npm,
                                                               with_ca=ca_bundle is not None))
        run_build(client, progress, path=ctx, tag=tag, labels={"nanoclaw.group": folder})
    progress(f"built {tag} in {time.monotonic() - started:.0f}s")
    return tag


# --- pruning: a group's images other than its current one, once no container uses them -------------

def stale_group_images(images: list[tuple[str, tuple[str, ...]]], keep: set[str], used: set[str]) -> list[str]:
    """Tags to remove, from (image id, its tags in the group's repository) pairs: every image that
    carries no tag in `keep` and that no container (running or not) was made from."""
    return sorted(tag for image_id, tags in images if image_id not in used and not keep & set(tags) for tag in tags)


def prune_group_images(folder: str, keep: set[str] = frozenset(), *, client=None) -> list[str]:
    """Remove the group's images (nanoclaw-agent-<folder>:*) except `keep` and those a container
    uses. A tag is removed, not the image by force: an image another repository also names stays,
    and one a container was made from meanwhile is refused by the engine. Returns the removed tags."""
    from docker.errors import APIError, ImageNotFound
    client = _client(client)
    repo = group_image_repo(folder)
    images = [(image.id, tuple(t for t in image.tags if t.startswith(repo + ":"))) for image in
              client.images.list(name=repo)]
    used = {c.get("ImageID") for c in client.api.containers(all=True)}
    removed = []
    for tag in stale_group_images(images, set(keep), used):
        try:
            client.images.remove(tag)
        except ImageNotFound:
            continue
        except APIError as exc:  # in use since we looked: the next pass tries again
            log.warning("could not remove the image %s: %s", tag, exc.explanation or exc)
            continue
        log.info("removed the image %s (no longer the image of %s)", tag, folder)
        removed.append(tag)
    return removed
