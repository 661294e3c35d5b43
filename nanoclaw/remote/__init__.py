"""Sessions over the network (issue 33): the door's TLS gate for sandboxes that run elsewhere.

    passes.py    a sandbox's credential: minted at start, bound to install, agent, session, expiry
    tls.py       the door's own CA and certificate (or the operator's)
    gate.py      the TLS listener: authenticate each connection, then relay it to the agent's proxy
                 socket or serve the session channel
    channel.py   the session channel: inbound snapshots down, outbound rows and files up
    exchange.py  a request on it and its answer; bodies.py: the room its request bodies share
    mirror.py    what a remote runner sends, checked and written into the host's copy of its session
    trees.py     files both ways (home/, the group folder) with the host's limits
"""
