"""Sandboxes: one per active session, Docker or bubblewrap (see base.py for the contract)."""
from .base import (INSTALL_LABEL, Mount, Runtime, RuntimeUnavailable, SandboxSpec, SecretInSandbox,
                   assert_no_secrets, known_secrets, select_runtime)

__all__ = ["INSTALL_LABEL", "Mount", "Runtime", "RuntimeUnavailable", "SandboxSpec", "SecretInSandbox",
           "assert_no_secrets", "known_secrets", "select_runtime"]
