"""Pushes and pulls cut at random points (issue 44): the connection between a remote runner and the
door dies after any number of bytes, either way, and the runner tries again as its loops do; or
the sandbox is killed there (its memory-backed folders gone) and a new one starts from the host.
Every answer is kept on the host exactly once, every claim as the runner has it, and the runner's
copy of inbound.db ends equal to the host's. The real door (gate, TLS, channel) and the runner's sync code;
only the network between them is a relay that cuts where Hypothesis says."""
from __future__ import annotations

import itertools
import socket
import sqlite3
import threading

from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from agent_runner.door_link import DoorLink
from agent_runner.remote import RemoteSession
from agent_runner.store import SessionStore
from nanoclaw.sessions import session_schema as schema
from nanoclaw.sessions import store
from nanoclaw.sessions.store import Target
from tests.fakes.accept_loop import AcceptLoop
from tests.remote.test_gate import door, session_of  # noqa: F401 - the fixture
from tests.remote.test_inbound_changes import contents

CHAT = Target("telegram", "111")
names = itertools.count()


class CuttingRelay:
    """127.0.0.1:port → the door, byte for byte. Once armed with numbers, the connection that would
    carry more than the first of them (bytes counted over all connections, either way) is cut there,
    and the count starts again for the next; kept-alive connections included."""

    def __init__(self, door_address):
        self.door = door_address
        self._lock = threading.Lock()
        self._left: int | None = None
        self._cuts: list[int] = []
        server = socket.create_server(("127.0.0.1", 0))
        self.port = server.getsockname()[1]
        self.loop = AcceptLoop(server, self._connect, name="cutting-relay")

    def arm(self, cuts: list[int]) -> None:
        with self._lock:
            self._cuts = list(cuts)
            self._left = self._cuts.pop(0) if self._cuts else None

    def _connect(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.door)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(src, dst, (client, upstream)), daemon=True).start()

    def _take(self, size: int) -> int:
        """How many of `size` bytes pass; fewer means the connection is cut there (and the next
        number is armed)."""
        with self._lock:
            if self._left is None or size <= self._left:
                self._left = None if self._left is None else self._left - size
                return size
            take, self._left = self._left, self._cuts.pop(0) if self._cuts else None
            return take

    def _pipe(self, src, dst, both) -> None:
        try:
            while data := src.recv(65536):
                take = self._take(len(data))
                dst.sendall(data[:take])
                if take < len(data):
                    raise OSError("cut")
        except OSError:
            pass
        for sock in both:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.loop.close()


def until_done(action, relay: CuttingRelay, cuts: list[int]) -> None:
    """The action through connections cut at each of `cuts` in turn (the runner's client tries a
    second connection itself; two cuts fail a request), tried again as the runner's loops do until
    it is done."""
    relay.arm(cuts)
    for _ in range(len(cuts) + 1):
        try:
            action()
            return
        except Exception:  # noqa: BLE001 - the cut, seen as any error the runner's loop catches
            continue
    raise AssertionError("the action failed on a whole connection")


step = st.one_of(
    st.tuples(st.just("answer"), st.integers(1, 3)),       # the runner answers: rows up
    st.tuples(st.just("claim"), st.integers(0, 5)),        # claims and outcomes: acks up
    st.tuples(st.just("message"), st.integers(1, 3)),      # the host's new messages: a pull
    st.tuples(st.just("kill"), st.integers(1, 4)),         # killed in a push (odd) or a pull (even)
)


@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(step, st.lists(st.integers(0, 4000), max_size=4)), min_size=1, max_size=6))
def test_cut_pushes_and_pulls_keep_every_answer_once_and_the_copies_equal(door, tmp_path_factory, steps):  # noqa: F811
    session_id = f"f{next(names)}"
    path, link = session_of(door, "andy", session_id)
    relay = CuttingRelay(door.address)
    cut_link = DoorLink(f"https://127.0.0.1:{relay.port}", link.token, door.ca)

    def start() -> tuple[RemoteSession, SessionStore, object]:
        """A new sandbox: empty folders, everything from the host."""
        local = tmp_path_factory.mktemp("sandbox")
        relay.arm([])
        sandbox = RemoteSession(cut_link, local / "session", local / "inbound", local / "group", local / "global")
        sandbox.bootstrap()
        return sandbox, SessionStore(local / "session", local / "inbound"), local

    try:
        sandbox, runner, local = start()
        for (kind, n), cuts in steps:
            if kind == "kill":
                if n % 2:
                    for _ in range(n):
                        runner.write_out({"op": "text", "text": f"lost or kept {n}"}, CHAT)
                else:
                    store.write_message(path, content={"text": "while it dies"}, target=CHAT)
                relay.arm(cuts or [0])
                try:  # dies wherever the cut falls: before, while or after the door took it
                    sandbox.push() if n % 2 else sandbox.pull(wait=5)
                except Exception:  # noqa: BLE001 - the kill
                    pass
                sandbox._up.close()
                sandbox._down.close()
                runner.close()
                sandbox, runner, local = start()
                continue
            if kind == "answer":
                for _ in range(n):
                    runner.write_out({"op": "text", "text": f"answer {n}"}, CHAT)
                until_done(sandbox.push, relay, cuts)
            elif kind == "claim":
                ids = [f"telegram:{session_id}-{k}" for k in range(n)]
                runner.claim(ids)
                runner.complete(ids[: n // 2])
                until_done(sandbox.push, relay, cuts)
            else:
                for k in range(n):
                    store.write_message(path, content={"text": f"m{k}"}, target=CHAT)
                until_done(lambda: sandbox.pull(wait=5), relay, cuts)
        relay.arm([])
        sandbox.push()
        host_out = sqlite3.connect(store.outbound_db(path))
        answers = "SELECT id, seq, content FROM messages_out ORDER BY seq"
        assert host_out.execute(answers).fetchall() == [tuple(r) for r in runner.out.execute(answers)]  # once, in order
        acks = "SELECT message_id, status, status_changed FROM processing_ack ORDER BY message_id"
        assert host_out.execute(acks).fetchall() == [tuple(r) for r in runner.out.execute(acks)]
        host_out.close()
        sandbox.pull(wait=0)
        host_in = schema.connect(store.inbound_db(path), readonly=True)
        assert contents(sqlite3.connect(local / "inbound" / schema.INBOUND)) == contents(host_in)
        host_in.close()
        runner.close()
    finally:
        relay.close()
