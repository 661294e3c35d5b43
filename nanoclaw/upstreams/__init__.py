"""Which model an agent runs on and where its calls go: named model upstreams (URL, auth style, a
secret's name, a price table), a model and fallbacks per agent, and the pure decisions of failover
(which upstream to try next, the circuit breaker). The proxy enforces them; the sandbox manager
tells the sandbox's CLI the agent's model; the CLI and the page change them."""
