"""How a sandbox starts: the manager (which session runs where, capacity, the queue), its spec and
mounts, start failures and their backoff, and setting a runtime up while the service runs."""
