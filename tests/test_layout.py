"""The house rules of the package (docs/architecture.md, "The package map"): rooms import only
downward as the map's table says, no import circle between files (imports inside functions
count: a lazy import that dodges a circle is still one), no file over 450 lines, at most 12
modules directly in nanoclaw/. Read from the source with ast: no module is imported."""
from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

from nanoclaw.config import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "nanoclaw"
SHARED_ROOT = {"config", "db", "models", "migrate", "security", "mounts", "proposal_rules", "metrics", "logs",
               "__init__", "platforms"}
ENTRY_POINTS = {"app", "service", "supervise", "cli"}
MAX_LINES = 450
MAX_ROOT_MODULES = 12


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every nanoclaw module this file imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known}
            found |= subs
            if base in known and len(subs) < len(node.names):
                found.add(base)  # names taken from the module itself
    found.discard(name)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


# A platform folder's files keep their layer: its declaration (the folder's __init__) and the
# registry are shared like the root modules; the rest are rooms of their own by what the file is.
PLATFORM_FILES = {"adapter": "platform adapters", "schema": "platform adapters", "text": "platform adapters",
                  "messages": "platform adapters", "handoff": "platform adapters", "media": "platform adapters",
                  "account": "platform adapters", "rpc": "platform adapters",
                  "listener": "platform listeners", "owner": "platform listeners", "spool": "platform listeners",
                  "commands": "platform commands", "doctor": "platform commands"}


def room(module: str) -> str:
    """'inbound' for nanoclaw.inbound.router, 'config' for nanoclaw.config, '__init__' for nanoclaw,
    'platforms' for the registry and a platform's declaration, 'platform adapters' for
    nanoclaw.platforms.telegram.adapter."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "platforms":
        return PLATFORM_FILES.get(parts[3], f"platform file {parts[3]}") if len(parts) > 3 else "platforms"
    return parts[1] if len(parts) > 1 else "__init__"


def allowed_imports() -> dict[str, set[str]]:
    """The map's table: room -> the rooms it may import (besides the shared root modules). A room is
    a folder (`inbound/`) or a kind of platform file (`platforms/*/adapter.py` and the like)."""
    text = (PROJECT_ROOT / "docs" / "architecture.md").read_text()
    allowed = {}
    for line in text.splitlines():
        m = re.match(r"^\| `(\w+)/` \|[^|]*\| ([^|]*) \|$", line)
        if m:
            allowed[m.group(1)] = set(re.findall(r"`([\w ]+)`", m.group(2)))
        m = re.match(r"^\| (platform \w+) [^|]*\|[^|]*\| ([^|]*) \|$", line)
        if m:
            allowed[m.group(1)] = set(re.findall(r"`([\w ]+)`", m.group(2)))
    return allowed


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_files():
    assert cycles(graph()) == []


def test_cycle_finder_finds_a_lazy_circle():
    """The check above would pass vacuously if the finder missed circles: it must see one."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_rooms_import_only_what_the_map_allows():
    allowed = allowed_imports()
    assert {"channels", "inbound", "approvals", "sessions", "runtime", "outbound", "tasks", "lifecycle",
            "operator", "proxy", "web", "cli"} <= set(allowed), "the map in docs/architecture.md lost a room"
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()} - {"platforms"}
    rooms |= {room(m) for m in modules() if m.startswith("nanoclaw.platforms.") and m.count(".") == 3}
    assert rooms <= set(allowed), f"rooms missing from the map: {sorted(rooms - set(allowed))}"
    wrong = []
    for module, targets in graph().items():
        here = room(module)
        for target in targets:
            there = room(target)
            if there == here or there in SHARED_ROOT:
                continue
            if here in allowed and there in allowed[here]:
                continue
            if here in ENTRY_POINTS - {"cli"} and there != "supervise":
                continue  # the entry points assemble everything
            wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_the_shared_root_imports_no_room():
    wrong = [f"{m} imports {t}" for m, targets in graph().items() if room(m) in SHARED_ROOT
             for t in targets if room(t) not in SHARED_ROOT]
    assert wrong == []


def test_no_file_is_longer_than_450_lines():
    long = {str(p.relative_to(PROJECT_ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_at_most_12_modules_at_the_root():
    root = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root) <= MAX_ROOT_MODULES, root


def test_every_module_says_what_it_owns():
    missing = [module_name(p) for p in PACKAGE.rglob("*.py")
               if ast.get_docstring(ast.parse(p.read_text())) is None]
    assert missing == []


@functools.cache  # one tokenizing per file, however many platforms look at it
def code_words(path: Path) -> tuple[tuple[int, str], ...]:
    """(line, text) of every name and string in a file's code: comments and docstrings left out."""
    import io
    import tokenize
    tokens = list(tokenize.generate_tokens(io.StringIO(path.read_text()).readline))
    words, previous = [], None
    for i, token in enumerate(tokens):
        if token.type == tokenize.STRING and previous in (None, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            j = i + 1
            while j < len(tokens) and tokens[j].type in (tokenize.NL, tokenize.COMMENT):
                j += 1
            following = tokens[j] if j < len(tokens) else None
            if following is None or following.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                previous = token.type
                continue  # a docstring
        if token.type in (tokenize.NAME, tokenize.STRING):
            words.append((token.start[0], token.string))
        if token.type not in (tokenize.NL, tokenize.COMMENT):
            previous = token.type
    return tuple(words)


def names(platform: str, word: str) -> bool:
    """Whether a code word names the platform. A platform that shares its name with a module of
    Python's own (signal) is named by a whole word in a string, or an identifier that starts with it
    (SIGNAL_…, signal_…), not by the module's use (signal.SIGTERM, add_signal_handler)."""
    if platform not in sys.stdlib_module_names:
        return platform in word.lower()
    if word[:1] in "\"'" or word[:2].lower() in ("f\"", "f'", "r\"", "r'", "b\"", "b'"):
        return re.search(rf"\b{platform}\b", word.lower()) is not None
    return word.lower().startswith(platform + "_")


def test_a_platform_is_named_in_code_only_in_its_own_folder():
    """Adding a platform is adding a folder: outside nanoclaw/platforms/<name>/ its name appears in
    code (not comments or docstrings) in at most one file, and no list of platforms is written out."""
    from nanoclaw import platforms
    files = [p for p in [*PACKAGE.rglob("*.py"), *(PROJECT_ROOT / "container" / "agent_runner").rglob("*.py")]]
    named: dict[str, list[str]] = {}
    for platform in platforms.names():
        own = PACKAGE / "platforms" / platform
        for path in files:
            if own in path.parents:
                continue
            hits = sorted({line for line, word in code_words(path) if names(platform, word)})
            if hits:
                named.setdefault(platform, []).append(f"{path.relative_to(PROJECT_ROOT)}:{hits}")
    assert {p: places for p, places in named.items() if len(places) > 1} == {}


def test_the_name_finder_sees_code_and_skips_prose(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text('"""Telegram in a docstring."""\n# telegram in a comment\nx = "telegram"\ntelegram_y = 1\n')
    assert [word for _line, word in code_words(sample) if "telegram" in word.lower()] == ['"telegram"', "telegram_y"]


def test_every_file_make_check_names_is_still_there():
    text = (PROJECT_ROOT / "Makefile").read_text()
    listed = re.search(r"^CHECK_TESTS := (.*?)\n\n", text, re.S | re.M).group(1)
    files = [f for f in re.split(r"[\s\\]+", listed) if f]
    assert len(files) > 20 and not [f for f in files if not (PROJECT_ROOT / f).is_file()]
