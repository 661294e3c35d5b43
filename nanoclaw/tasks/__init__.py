"""Scheduled tasks: what an agent asked to be done later or regularly, and running it on time."""
