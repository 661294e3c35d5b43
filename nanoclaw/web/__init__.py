"""The web program's blueprints: webhooks, the operator page, the web chat, health."""
