"""What the agents' model calls cost and what they may spend: the price table, the ledger the proxy
writes for every call, and the budgets the proxy enforces before a call leaves the machine."""
