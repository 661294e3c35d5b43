"""The parts of the SDK's dependencies the runner never runs, kept out of its start (issue 43: the cold start).

`claude_agent_sdk` imports `mcp` (and `mcp` its wire types, pydantic models of five protocol revisions,
its HTTP transports and their auth, starlette, uvicorn and httpx2) and `jsonschema`, all to serve
in-process MCP servers. The runner serves its tools itself (tool_server.py: the JSON-RPC the CLI
sends an in-process server), so none of mcp is ever called; the SDK only names its types at import
(base classes, annotations, the helpers `create_sdk_mcp_server` and `tool`, which the runner does not
use). Left in, they were about half a second of CPU at every sandbox start (0.6-0.8 s of imports
against 0.2 s now, on the host) and 214 of the runner's 513 modules.

`install()` puts a finder first on sys.meta_path that
- answers the names in LEFT_OUT with a stand-in module: each name taken from it is a class that
  refuses to be made, so a path that did need one fails loudly, naming it, rather than quietly doing less;
- answers the SDK's bridge module with one whose `SdkMcpBridge` is tool_server.ToolBridge (BRIDGE);
- loads the modules in LATER at their first use rather than at import (the runner's tools validate
  their arguments with jsonschema at the first call).
What is left out is checked by tests/test_lean.py, which drives the runner's tools through the SDK
with the finder in place; every end-to-end turn runs through it.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

LEFT_OUT = ("mcp", "mcp_types", "claude_agent_sdk._internal._mcp_compat")
BRIDGE = "claude_agent_sdk._internal.sdk_mcp_bridge"
LATER = ("jsonschema",)


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
        def subclassed(cls, **_options):  # the SDK subclasses some (ToolAnnotations, extra="allow")
            pass

        stand_in = type(name, (Exception,), {"__new__": refuse, "__module__": self.__name__,
                                             "__init_subclass__": classmethod(subclassed)})
        setattr(self, name, stand_in)
        return stand_in


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == BRIDGE or any(fullname == name or fullname.startswith(name + ".") for name in LEFT_OUT):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname != BRIDGE)
        if fullname in LATER:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = importlib.util.LazyLoader(spec.loader)
            return spec
        return None

    def create_module(self, spec):
        if spec.name == BRIDGE:
            from .tool_server import ToolBridge
            module = types.ModuleType(spec.name, "The runner's tools bridge (agent_runner/tool_server.py).")
            module.SdkMcpBridge = ToolBridge
            return module
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
