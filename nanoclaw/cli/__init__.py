"""`flask --app app nanoclaw …`: the operator's command line, one module per command group.

Every mistake prints one line and exits 2; nothing here shows a traceback for bad input.
"""
from __future__ import annotations

import click

from .. import platforms
from .base import Group


class WithPlatforms(Group):
    """The command group. Our commands are loaded the first time one is asked for or the list is
    shown; each platform's own (nanoclaw/platforms/<name>/commands.py) the first time a command not
    found among ours is: the web program, which registers the group and never runs a command, loads
    neither (their modules, the platforms' clients: mautrix, aiohttp, the Slack SDK)."""
    _loaded = False
    _ours = False

    def _our_commands(self) -> None:
        if self._ours:
            return
        self._ours = True
        from . import (admin, agents, backup, credentials, destinations, doctor, egress, image, internet, memory,
                       links, models, mounts, pairing, service, skills, tasks, usage, webhooks)  # noqa: F401  (links: agent subcommands)
        for command in (service.migrate_cmd, agents.agent_group, agents.user_group, agents.wire, agents.unwire,
                        agents.wirings, mounts.mount_group, service.proxy_cmd, service.chat_cmd, image.image_group,
                        admin.admin_group, tasks.tasks_group,
                        credentials.credentials_group, egress.egress_group, pairing.pair_cmd, doctor.doctor_cmd,
                        destinations.destination_group, backup.backup_cmd, backup.restore_cmd, backup.prune_cmd,
                        usage.usage_cmd, usage.budget_group, models.upstream_group, models.model_group,
                        memory.memory_group, memory.history_group, internet.internet_group, skills.skill_group,
                        webhooks.webhook_group):
            self.add_command(command)

    def _platforms(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for platform in platforms.all_platforms():
            if platform.commands:
                found = platform.part(platform.commands)
                for one in found if isinstance(found, (list, tuple)) else (found,):
                    self.add_command(one)

    def get_command(self, ctx, name):
        self._our_commands()
        found = super().get_command(ctx, name)
        if found is None and not self._loaded:
            self._platforms()
            found = super().get_command(ctx, name)
        return found

    def list_commands(self, ctx):
        self._our_commands()
        self._platforms()
        return super().list_commands(ctx)


@click.group("nanoclaw", cls=WithPlatforms)
def nanoclaw_group():
    """NanoClaw: agents, users, wirings, migrations and the service's helper programs."""

