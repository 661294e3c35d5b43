"""The browser sandbox's first program (stdlib only: it runs with the sandbox's own Python).

The sandbox has no network but its own loopback, and Chromium takes a proxy only by TCP. So this
listens on 127.0.0.1:PORT inside, hands every connection to the host's proxy over the unix socket
bound in (the host checks each one), and then becomes Chromium: `relay.py SOCKET PORT -- CHROMIUM
ARGS…`. Playwright's pipe to Chromium (descriptors 3 and 4) passes through the exec untouched.
"""
from __future__ import annotations

import os
import socket
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        conn, _ = listener.accept()
        host = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            host.connect(path)
        except OSError:
            conn.close()
            host.close()
            continue
        threading.Thread(target=_pump, args=(conn, host), daemon=True).start()
        threading.Thread(target=_pump, args=(host, conn), daemon=True).start()


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.exit("usage: relay.py SOCKET PORT -- CHROMIUM ARGS…")
    path, port, command = argv[0], int(argv[1]), argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    if os.fork() == 0:  # the relay: Chromium's pipe is not its business
        for fd in (3, 4):
            try:
                os.close(fd)
            except OSError:
                pass
        _serve(listener, path)
        os._exit(0)
    listener.close()
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
