"""What an agent remembers and what it can look up, kept by the host: a bounded memory per agent and
audience (a person's private memory in their own conversations, one per other chat), written through
the agent's `memory` tool and shown to the model as a snapshot frozen for a conversation; and the
index of what was said (the messages the router wrote into a session, the replies delivered),
searched through `search_history`. The host decides every scope from its own records."""
