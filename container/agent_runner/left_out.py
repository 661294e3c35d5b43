"""The parts of `mcp` the runner never runs, kept out of its start (issue 43: the cold start).

`claude_agent_sdk` imports `mcp`, and mcp's package imports its HTTP transports, their auth and its
high-level server, with starlette, uvicorn, sse-starlette and httpx2 under them: about 180 modules
and a fifth of the SDK's import time at every sandbox start (bench/sandbox_start.py). The runner
serves its tools in-process over the SDK's memory streams, so none of them is ever called; mcp
only names them at import (annotations, defaults, the HTTP app it never builds here). Nor does it
need the wire types of protocol revision 2026-07-28 (pydantic models built at import, about as
long again): the CLI bundled with the SDK opens an in-process server with `initialize` at
2025-11-25, whose types are the 2025 revision's.

`install()` puts a finder first on sys.meta_path that answers those names with a stand-in module.
Each name taken from a stand-in is a class that refuses to be made, so a path that did need one
fails loudly, naming it, rather than quietly doing less. What is left out is listed here and
checked by tests/test_lean.py, which drives the runner's own tools server through the SDK's bridge
with the finder in place.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

LEFT_OUT = (
    "uvicorn", "sse_starlette", "starlette", "httpx2",
    "mcp.server.auth", "mcp.server.streamable_http", "mcp.server.streamable_http_manager",
    "mcp.server.mcpserver", "mcp.client.streamable_http", "mcp.client.session_group",
    "mcp_types._v2026_07_28",
)


class LeftOutError(RuntimeError):
    pass


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):  # import machinery and introspection probe these; absent is right
            raise AttributeError(name)
        where = f"{self.__name__}.{name}"

        def refuse(cls, *args, **kwargs):
            raise LeftOutError(f"{where} is left out of the agent runner (agent_runner/left_out.py)")

        # An exception class: a stand-in may be named in an `except` clause as well as called.
        stand_in = type(name, (Exception,), {"__new__": refuse, "__module__": self.__name__})
        setattr(self, name, stand_in)
        return stand_in


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if any(fullname == name or fullname.startswith(name + ".") for name in LEFT_OUT):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []  # a package, so `from a.b.c import d` finds its submodules here too
        return module

    def exec_module(self, module) -> None:
        pass


def install() -> None:
    """Before the SDK's first import; a module already loaded stays as it is."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def is_stand_in(module) -> bool:
    return isinstance(module, _StandIn)
