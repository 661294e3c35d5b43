"""Model upstreams: named model endpoints the host keeps, like credential routes, in a file the
proxy reads on use (data/policy/upstreams.json; prices of an upstream with its own table beside it,
in data/policy/upstream-prices/). The default upstream `anthropic` is not in the file: it is what
ANTHROPIC_UPSTREAM_URL and ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN) give.

A file names a secret by its host environment variable, never its value; every upstream's secret
name joins the names no agent may ask a credential route or an MCP server for.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from agent_runner.proposal_rules import SECRET_NAME_RE

from ..proposal_rules import RuleError, check_upstream
from ..usage import prices

DEFAULT = "anthropic"
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
AUTH_STYLES = ("x-api-key", "bearer", "none")
PRICE_KINDS = ("default", "free", "file")
FILE = "upstreams.json"
PRICES_DIR = "upstream-prices"
MAX_FILE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Upstream:
    name: str
    url: str                   # https://… (or http:// on loopback, for a local model server)
    auth: str                  # x-api-key | bearer | none
    secret: str | None = None  # the host environment variable holding its key
    prices: str = "default"    # default | free | file (data/policy/upstream-prices/<name>.json)

    @property
    def free(self) -> bool:
        return self.prices == "free"

    def as_dict(self) -> dict:
        out = {"name": self.name, "url": self.url, "auth": self.auth, "prices": self.prices}
        if self.secret:
            out["secret"] = self.secret
        return out

    def describe(self) -> str:
        key = f" with ${self.secret}" if self.secret else ""
        return f"{self.name}: {self.url} ({self.auth}{key}; prices {self.prices})"


def check_name(raw: str) -> str:
    name = (raw or "").strip()
    if not NAME_RE.match(name):
        raise RuleError(f"{raw!r}: an upstream's name is a lower-case letter, then up to 30 letters, digits and '-' "
                        "(e.g. ollama, openrouter, work-litellm)")
    return name


def check_url(raw: str) -> str:
    """https:// anywhere; http:// only to this machine (a local model server such as Ollama)."""
    url = (raw or "").strip().rstrip("/")
    if re.match(r"^http://(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?(/.*)?$", url):
        return url
    return check_upstream(url)


def check_secret_variable(raw: str) -> str:
    """The owner's name for the variable holding an upstream's key (its format only: the owner chose
    where that key goes; it then joins the names no agent may ask for)."""
    name = (raw or "").strip()
    if not SECRET_NAME_RE.match(name):
        raise RuleError(f"{raw!r}: a secret is named by a host environment variable such as OPENROUTER_API_KEY "
                        "(capitals, digits, '_')")
    return name


def check(data) -> Upstream:
    if not isinstance(data, dict):
        raise RuleError("an upstream must be an object")
    name = check_name(str(data.get("name") or ""))
    if name == DEFAULT:
        raise RuleError(f"{DEFAULT!r} is the default upstream (ANTHROPIC_UPSTREAM_URL); give another name")
    auth = str(data.get("auth") or "")
    if auth not in AUTH_STYLES:
        raise RuleError(f"auth must be one of {', '.join(AUTH_STYLES)}, not {auth!r}")
    secret = data.get("secret")
    if auth == "none":
        secret = None
    elif not secret:
        raise RuleError(f"auth {auth} needs --secret ENV_NAME (the variable that holds the key)")
    else:
        secret = check_secret_variable(str(secret))
    kind = str(data.get("prices") or "default")
    if kind not in PRICE_KINDS:
        raise RuleError(f"prices must be default, free or a file, not {kind!r}")
    return Upstream(name, check_url(str(data.get("url") or "")), auth, secret, kind)


def parse(data) -> dict[str, Upstream]:
    if not isinstance(data, dict):
        raise RuleError("upstreams.json must hold an object")
    found: dict[str, Upstream] = {}
    for raw in data.get("upstreams") or []:
        upstream = check(raw)
        if upstream.name in found:
            raise RuleError(f"the upstream {upstream.name!r} is named twice")
        found[upstream.name] = upstream
    return found


def path_of(policy_dir: Path) -> Path:
    return Path(policy_dir) / FILE


def read(policy_dir: Path) -> dict[str, Upstream]:
    """The registered upstreams (the default one is not among them); RuleError for a bad file."""
    path = path_of(policy_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    if len(raw) > MAX_FILE_BYTES:
        raise RuleError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        data = json.loads(raw.decode("utf-8") or "{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise RuleError(f"{path.name} is not valid JSON: {exc}") from None
    return parse(data)


def secret_names(policy_dir: Path) -> tuple[str, ...]:
    """Every registered upstream's secret name (for the reserved names); () when unreadable."""
    try:
        return tuple(sorted({u.secret for u in read(policy_dir).values() if u.secret}))
    except RuleError:
        return ()


def price_table(policy_dir: Path, upstream: Upstream | None, default_table: dict) -> dict:
    """What an upstream's calls cost: the default table, nothing (free), or its own file."""
    if upstream is None or upstream.prices == "default":
        return default_table
    if upstream.free:
        return {}
    own = Path(policy_dir) / PRICES_DIR / f"{upstream.name}.json"
    try:
        data = json.loads(own.read_text())
        return prices.with_server_tools(data.get("models", {}),
                                        {**prices.default_server_tools(), **data.get("server_tool_use", {})})
    except (OSError, ValueError, AttributeError, TypeError):
        return default_table  # a table that cannot be read: never free


def load_price_file(path: Path) -> dict:
    """An owner's price table for an upstream (the shape of usage/prices.json), checked."""
    try:
        data = json.loads(Path(path).read_text())
        models = data["models"]
        assert isinstance(models, dict) and models
        for name, rates in models.items():
            assert isinstance(name, str) and isinstance(rates, dict)
            for part in prices.PARTS:
                assert isinstance(rates.get(part, 0.0), (int, float)) and rates.get(part, 0.0) >= 0
    except (OSError, ValueError, KeyError, AssertionError, TypeError) as exc:
        raise RuleError(f"{path} is not a price table like nanoclaw/usage/prices.json "
                        f"({{\"models\": {{name: {{input, output, cache_write, cache_read}}}}}}): {exc or 'bad shape'}"
                        ) from None
    return data
