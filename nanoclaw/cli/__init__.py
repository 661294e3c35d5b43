"""`flask --app app nanoclaw …`: the operator's command line, one module per command group.

Every mistake prints one line and exits 2; nothing here shows a traceback for bad input.
"""
from __future__ import annotations

import click

from . import (admin, agents, backup, credentials, destinations, doctor, egress, image, memory, models, mounts,
               pairing, service, tasks, usage)
from .. import platforms
from .base import Group


@click.group("nanoclaw", cls=Group)
def nanoclaw_group():
    """NanoClaw: agents, users, wirings, migrations and the service's helper programs."""


for _command in (service.migrate_cmd, agents.agent_group, agents.user_group, agents.wire, agents.unwire,
                 agents.wirings, mounts.mount_group, service.proxy_cmd, service.chat_cmd, image.image_group,
                 admin.admin_group, tasks.tasks_group,
                 credentials.credentials_group, egress.egress_group, pairing.pair_cmd, doctor.doctor_cmd,
                 destinations.destination_group, backup.backup_cmd, backup.restore_cmd, backup.prune_cmd,
                 usage.usage_cmd, usage.budget_group, models.upstream_group, models.model_group,
                 memory.memory_group, memory.history_group):
    nanoclaw_group.add_command(_command)

# each platform's set-up commands, from its folder (nanoclaw/platforms/<name>/commands.py)
for _platform in platforms.all_platforms():
    if _platform.commands:
        _found = _platform.part(_platform.commands)
        for _command in _found if isinstance(_found, (list, tuple)) else (_found,):
            nanoclaw_group.add_command(_command)
