"""A group's images do not pile up (real Docker engine): after a rebuild the previous image is
removed once no sandbox uses it, the current one stays; deleting the agent stops its sandboxes and
removes its images; nothing outside the group's own repository is touched."""
from __future__ import annotations

import io
import os
import uuid

import pytest

from nanoclaw.lifecycle.image_prune import prune_stale_images
from nanoclaw.models import AgentGroup, Session
from nanoclaw.runtime import docker as docker_rt
from nanoclaw.runtime.image import group_image_repo, stale_group_images
from nanoclaw.sandboxes.manager import SandboxManager, build_spec
from nanoclaw.sessions import store
from tests.conftest import require


def test_only_unused_images_without_a_kept_tag_are_stale():
    images = [("sha:1", ("r:old",)), ("sha:2", ("r:prev",)), ("sha:3", ("r:cur", "r:alias")), ("sha:4", ("r:x",))]
    assert stale_group_images(images, keep={"r:cur"}, used={"sha:2"}) == ["r:old", "r:x"]
    assert stale_group_images(images, keep=set(), used=set()) == ["r:alias", "r:cur", "r:old", "r:prev", "r:x"]


@pytest.fixture
def engine(make_settings, sqlite_url, monkeypatch):
    client, where = docker_rt.connect()
    require(client is not None, f"no Docker engine answers ({where}); scripts/docker-engine.sh start")
    settings = make_settings(DATABASE_URL=sqlite_url, NANOCLAW_INSTALL_ID=f"prune-{os.getpid()}")
    try:
        client.images.get(settings.agent_image)
    except Exception:  # noqa: BLE001
        require(False, f"no agent image {settings.agent_image} (flask --app app nanoclaw image build)")
    from nanoclaw.app import create_app
    from nanoclaw.db import database
    from nanoclaw.migrate import apply_pending
    app = create_app(settings)
    database.connect(reuse_if_open=True)
    apply_pending(database.obj, log=lambda _l: None)
    folder = f"prune-{uuid.uuid4().hex[:8]}"
    yield app, settings, client, folder
    for image in client.images.list(name=group_image_repo(folder)):
        client.images.remove(image.id, force=True)
    database.close()


def build(client, settings, folder: str, n: int) -> str:
    """A small image in the group's repository, on the agent image, as a rebuild would make."""
    tag = f"{group_image_repo(folder)}:{uuid.uuid4().hex[:12]}"
    dockerfile = f"FROM {settings.agent_image}\nLABEL nanoclaw.group={folder} nanoclaw.test.build={n}\n"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, pull=False)
    return tag


def tags(client, folder) -> set[str]:
    return {t for image in client.images.list(name=group_image_repo(folder)) for t in image.tags}


def start_on(manager, settings, folder, image) -> str:
    """A sandbox of the group running `image` (a session that is talking, say)."""
    session = Session.create(id=store.new_session_id(), agent_group=AgentGroup.get(AgentGroup.folder == folder))
    store.prepare(store.session_path(settings.sessions_dir, folder, session.id), store.Target("cli", "x"))
    manager.runtime.start(build_spec(settings, folder, session.id, image=image, command=("sleep", "60")))
    assert manager.is_running(folder, session.id)
    return session.id


def test_the_previous_image_goes_once_no_sandbox_uses_it_and_a_deleted_agent_leaves_none(engine):
    app, settings, client, folder = engine
    oldest, previous, current = (build(client, settings, folder, n) for n in range(3))
    AgentGroup.create(name="Pruned", folder=folder, container_config={"image": current})
    manager = SandboxManager(settings, docker_rt.DockerRuntime(client, image=settings.agent_image))
    talking = start_on(manager, settings, folder, previous)  # not restarted yet: still on the previous image
    try:
        removed = prune_stale_images(settings, manager)
        assert removed == [oldest]
        assert tags(client, folder) == {previous, current}
        assert client.images.get(settings.agent_image)  # the engine's other images are not ours to prune

        manager.stop(folder, talking)  # the restart: no sandbox uses the previous image any more
        assert prune_stale_images(settings, manager) == [previous]
        assert tags(client, folder) == {current}
        assert prune_stale_images(settings, manager) == []  # the current image stays

        on_current = start_on(manager, settings, folder, current)
        result = app.test_cli_runner().invoke(args=["nanoclaw", "agent", "delete", folder])
        assert result.exit_code == 0, result.output
        assert "stopped 1 running sandbox(es)" in result.output and f"removed image {current}" in result.output
        assert not manager.is_running(folder, on_current)
        assert tags(client, folder) == set()
    finally:
        for name in manager.running():
            manager.runtime.stop(name, timeout=1)


def test_pruning_leaves_other_groups_and_installs_alone(engine):
    app, settings, client, folder = engine
    mine = build(client, settings, folder, 0)
    AgentGroup.create(name="Mine", folder=folder, container_config={"image": mine})
    other_folder = f"{folder}-other"
    other = build(client, settings, other_folder, 1)  # another install's group, or one this DB never had
    try:
        manager = SandboxManager(settings, docker_rt.DockerRuntime(client, image=settings.agent_image))
        assert prune_stale_images(settings, manager) == []
        assert tags(client, other_folder) == {other} and tags(client, folder) == {mine}
    finally:
        client.images.remove(other, force=True)
