"""Sessions over the network transport, end to end: the sandbox sees none of the host's folders and
reaches its session only through the door's TLS gate (real Docker, the real SDK against the fake
model, Telegram faked at HTTP)."""
from __future__ import annotations

from tests.outbound.test_nudges import OWNER, _script
from tests.remote.flow import owner_dm
from tests.service_harness import free_port
from tests.tg_flow import message, sandbox_service, texts


def network(port: int) -> dict:
    return dict(NANOCLAW_SESSION_TRANSPORT="network", NANOCLAW_DOOR_LISTEN=f"127.0.0.1:{port}",
                NANOCLAW_DOOR_URL=f"https://127.0.0.1:{port}", NANOCLAW_DOOR_RELAY_NETWORK="host")


def test_a_sandbox_without_the_hosts_folders_answers_and_restarts(make_settings, sqlite_url):
    with sandbox_service(make_settings, sqlite_url, _script, runtime="docker", **network(free_port())) as svc:
        assert svc.runtime.door is not None
        owner_dm(svc)
        for n, word in enumerate(("one", "two", "three"), start=1):
            svc.post(message(111, OWNER, word))
            svc.wait(lambda: len(texts(svc.tg, 111)) >= n, timeout=90, what=f"the answer to {word!r}")
            names = svc.runtime.list_sandboxes(svc.settings.install_id)
            mounts = svc.runtime.client.containers.get(names[0]).attrs["Mounts"]
            assert [m["Type"] for m in mounts] == ["volume"]  # the door relay's socket; none of this machine's folders
            for name in names:
                svc.runtime.stop(name)
        assert texts(svc.tg, 111) == ["answer to one", "answer to two", "answer to three"]
