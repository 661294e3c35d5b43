"""Lifecycle: the web program's background work that keeps sessions and sandboxes healthy."""
