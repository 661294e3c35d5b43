"""Sandboxes: one per active session, Docker or bubblewrap.

base.py is the contract (SandboxSpec, Runtime), docker.py and bwrap.py implement it, image.py builds
the agent image, select.py picks the runtime this host uses.
"""
