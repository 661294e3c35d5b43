"""What an agent may propose to the operator: the checks both sides run.

Stdlib only: the runner checks a proposal before it queues it (so the agent hears at once what is
wrong) and the host checks it again before it is shown and before it is applied (the sandbox is not
trusted). The proxy reads its allowlist entries with the same host rules.

Every check returns the normalised value or raises RuleError with a sentence the agent can act on.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_PACKAGES = 20
MAX_TEXT = 2000

_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_DNS_RE = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_PATH_SEG = r"[A-Za-z0-9._~-]+"
PATH_PREFIX_RE = re.compile(rf"^/(?:{_PATH_SEG}/)+$")
SECRET_NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]{1,63}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
APT_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]{1,63}$")
PIP_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")  # a PyPI project name, no version
NPM_RE = re.compile(r"^(?:@[a-z0-9][a-z0-9._-]{0,99}/)?[a-z0-9][a-z0-9._-]{0,113}$")
# pip and npm take a name ending like this for a file to install, when one of that name is at hand
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz",
                    ".egg", ".pybundle")
MCP_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")

# The model route of the proxy; a credential route may not shadow it.
RESERVED_PREFIXES = ("/v1/",)
# Variables the host keeps for itself: no credential route may hand them to an upstream the agent
# names, and no MCP server may ask for them. Each chat platform's own prefixes come on top: the host
# passes its registry's (nanoclaw/proposal_rules.py), and gives them to the sandbox in
# NANOCLAW_RESERVED_SECRET_PREFIXES for the runner's first check.
RESERVED_SECRET_PREFIXES = ("ANTHROPIC_", "CLAUDE_", "NANOCLAW_", "DATABASE_", "AWS_", "GOOGLE_APPLICATION_")
RESERVED_SECRET_NAMES = frozenset({"SECRET_KEY", "FLASK_SECRET_KEY", "DATABASE_URL", "PATH", "HOME",
                                   "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "NODE_OPTIONS"})


class RuleError(ValueError):
    """A proposal that breaks a rule; the message says which and how to fix it."""


@dataclass(frozen=True)
class HostEntry:
    """One egress allowlist entry: `host`, `host:port`, `*.domain` or `[v6]:port`."""
    host: str            # lower case, no trailing dot, no brackets; for a wildcard the base domain
    port: int | None     # None = the HTTPS port (443) only
    wildcard: bool = False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = f"*.{host}" if self.wildcard else host
        return f"{host}:{self.port}" if self.port is not None else host

    def effective_port(self) -> int:
        return 443 if self.port is None else self.port


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def check_port(raw: str | int) -> int:
    try:
        port = int(str(raw), 10)
    except ValueError:
        raise RuleError(f"port {raw!r} is not a number") from None
    if not 1 <= port <= 65535:
        raise RuleError(f"port {port} is outside 1-65535")
    return port


def check_hostname(raw: str) -> str:
    """A DNS name or an IP literal (no brackets), normalised to lower case without a trailing dot."""
    host = (raw or "").strip().lower().rstrip(".")
    if not host:
        raise RuleError("no host given")
    if _ip(host) is not None:
        return str(_ip(host))
    if len(host) > 253 or not _DNS_RE.match(host):
        raise RuleError(f"{raw!r} is not a valid host name (letters, digits, '-' and '.'; no scheme, "
                        "path or spaces)")
    return host


def split_host_port(raw: str) -> tuple[str, str | None]:
    """'h', 'h:443', '[::1]:443', '::1' -> (host, port text or None)."""
    text = (raw or "").strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise RuleError(f"{raw!r}: missing ']' after an IPv6 address")
        host, rest = text[1:end], text[end + 1:]
        if rest and not rest.startswith(":"):
            raise RuleError(f"{raw!r}: expected ':port' after ']'")
        return host, (rest[1:] or None) if rest else None
    if text.count(":") > 1:  # a bare IPv6 address
        return text, None
    host, sep, port = text.partition(":")
    return host, (port if sep else None)


def check_host_entry(raw: str) -> HostEntry:
    """An egress allowlist entry. Schemes, paths and user info are refused, not stripped."""
    text = (raw or "").strip()
    if not text:
        raise RuleError("no host given")
    if "://" in text or "/" in text or "@" in text or any(c.isspace() for c in text):
        raise RuleError(f"{raw!r}: give a host name like api.example.com or host:port, without "
                        "scheme, path or user")
    wildcard = text.startswith("*.")
    host, port = split_host_port(text[2:] if wildcard else text)
    host = check_hostname(host)
    if wildcard:
        if _ip(host) is not None:
            raise RuleError(f"{raw!r}: a wildcard needs a domain, not an address")
        if host.count(".") < 1:
            raise RuleError(f"{raw!r}: a wildcard must name at least a second-level domain (*.example.com)")
    return HostEntry(host, check_port(port) if port is not None else None, wildcard)


def check_path_prefix(raw: str) -> str:
    prefix = (raw or "").strip()
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if not PATH_PREFIX_RE.match(prefix) or any(seg in (".", "..") for seg in prefix.split("/")):
        raise RuleError(f"{raw!r} is not a path prefix like /github/ (letters, digits, '.', '_', '~', '-')")
    for reserved in RESERVED_PREFIXES:
        if prefix.startswith(reserved) or reserved.startswith(prefix):
            raise RuleError(f"{prefix} would shadow the model route {reserved}")
    return prefix


def check_route_match(raw: str) -> str:
    """A credential route is keyed by a path prefix (/github/) or a host name (api.github.com)."""
    text = (raw or "").strip()
    if text.startswith("/"):
        return check_path_prefix(text)
    entry = check_host_entry(text)
    if entry.wildcard:
        raise RuleError(f"{raw!r}: a credential route names one host, not a wildcard")
    return str(entry)


def check_upstream(raw: str) -> str:
    """https://host[:port][/base], nothing else: the token never travels in clear text."""
    text = (raw or "").strip()
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise RuleError(f"{raw!r} is not a URL: {exc}") from None
    if parts.scheme != "https":
        raise RuleError(f"{raw!r}: the upstream must be an https:// URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise RuleError(f"{raw!r}: no user, query or fragment in the upstream URL")
    host = check_hostname(parts.hostname or "")
    path = parts.path.rstrip("/")
    if path and (not re.match(rf"^(?:/{_PATH_SEG})+$", path) or any(s in (".", "..") for s in path.split("/"))):
        raise RuleError(f"{raw!r}: the upstream path may use only letters, digits, '.', '_', '~', '-'")
    shown = f"[{host}]" if ":" in host else host
    return f"https://{shown}{f':{port}' if port else ''}{path}"


def check_secret_name(raw: str, reserved: tuple[str, ...] = ()) -> str:
    name = (raw or "").strip()
    if not SECRET_NAME_RE.match(name):
        raise RuleError(f"{raw!r}: a secret is named by a host environment variable such as GITHUB_TOKEN "
                        "(capitals, digits, '_')")
    if name in RESERVED_SECRET_NAMES or name.startswith(RESERVED_SECRET_PREFIXES + tuple(reserved)):
        raise RuleError(f"{name} is reserved for the host itself and cannot be used for a route")
    return name


def check_packages(apt, npm, pip=None) -> tuple[list[str], list[str], list[str]]:
    apt_list, npm_list, pip_list = _names(apt, "apt"), _names(npm, "npm"), _names(pip, "pip")
    count = len(apt_list) + len(npm_list) + len(pip_list)
    if not count:
        raise RuleError("name at least one apt, npm or pip package")
    if count > MAX_PACKAGES:
        raise RuleError(f"at most {MAX_PACKAGES} packages per request ({count} given)")
    for name in apt_list:
        if not APT_RE.match(name):
            raise RuleError(f"{name!r} is not a Debian package name (lower case letters, digits, '+', '-', '.')")
    for name in npm_list:
        if not NPM_RE.match(name) or name.endswith(ARCHIVE_SUFFIXES):
            raise RuleError(f"{name!r} is not an npm package name (lower case, optionally @scope/name; a registry "
                            "name, never a file)")
    for name in pip_list:
        if not PIP_RE.match(name) or name.lower().endswith(ARCHIVE_SUFFIXES):
            raise RuleError(f"{name!r} is not a PyPI package name (letters, digits, '.', '_', '-'; no version; a "
                            "registry name, never a file)")
    return sorted(set(apt_list)), sorted(set(npm_list)), sorted(set(pip_list))


def _names(value, kind: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RuleError(f"{kind} must be a list of package names")
    return [v.strip() for v in value if v.strip()]


def check_text(raw, what: str = "text", limit: int = MAX_TEXT, *, required: bool = True) -> str:
    text = (raw or "").strip() if isinstance(raw, str) or raw is None else None
    if text is None:
        raise RuleError(f"{what} must be text")
    if required and not text:
        raise RuleError(f"{what} is empty")
    if len(text) > limit:
        raise RuleError(f"{what} is longer than {limit} characters")
    return text


def check_mcp_server(name, command, args=None, env=None, reserved: tuple[str, ...] = ()) -> dict:
    """An MCP server the agent wants started (stdio, inside its own sandbox)."""
    name = (name or "").strip() if isinstance(name, str) else ""
    if not MCP_NAME_RE.match(name) or name == "nanoclaw":
        raise RuleError(f"{name!r}: an MCP server name is lower case letters, digits, '_', '-' (not 'nanoclaw')")
    command = check_text(command, "command", 256)
    args = [] if args in (None, "") else args
    if not isinstance(args, (list, tuple)) or len(args) > 32 or not all(isinstance(a, str) for a in args):
        raise RuleError("args must be a list of at most 32 strings")
    env = [] if env in (None, "") else env
    if isinstance(env, str):
        env = env.replace(",", " ").split()
    if not isinstance(env, (list, tuple)) or len(env) > 16 or not all(isinstance(e, str) for e in env):
        raise RuleError("env must be a list of at most 16 variable names")
    for text in [command, *args]:
        if "\x00" in text or "\n" in text or len(text) > 1024:
            raise RuleError("command and args may not contain newlines or NUL and are at most 1024 characters")
    for var in env:
        if not ENV_NAME_RE.match(var):
            raise RuleError(f"{var!r} is not an environment variable name")
        upper = var.upper()
        if upper in RESERVED_SECRET_NAMES or upper.startswith(RESERVED_SECRET_PREFIXES + tuple(reserved)):
            raise RuleError(f"{var} is reserved for the host")
    return {"name": name, "command": command, "args": list(args), "env": sorted(set(env))}


def check_agent(name, instructions) -> tuple[str, str]:
    return check_text(name, "name", 64), check_text(instructions, "instructions", 20000, required=False)
