"""A TCP proxy in front of the apiserver that a test can cut, so one operator loses the
apiserver while the test (and every other client) still reaches it.

`ApiProxy.cut("blackhole")` is a network partition: connections open and new ones are
accepted, but no byte goes through either way, so every request waits for its timeout.
`cut("refuse")` closes the port and every connection: requests fail at once. `restore()`
forwards again.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import yaml

Cut = Literal["blackhole", "refuse"]


class ApiProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener: socket.socket | None = None
        self.port = 0
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()

    def start(self) -> ApiProxy:
        self._listen()
        return self

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def kubeconfig(self, original: Path, path: Path) -> Path:
        """A copy of `original` whose server is this proxy."""
        config = yaml.safe_load(original.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path.write_text(yaml.safe_dump(config))
        return path

    def cut(self, how: Cut) -> None:
        self._forwarding.clear()
        if how == "refuse":
            self._close_all()

    def restore(self) -> None:
        if self._listener is None:
            self._listen()
        self._forwarding.set()

    def close(self) -> None:
        self._closed = True
        self._forwarding.set()
        self._close_all()

    def _close_all(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            open_sockets, self._sockets = self._sockets, set()
        for sock in [listener, *open_sockets]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            self._sockets.add(client)
        self._forwarding.wait()  # a partition: the connection is held, nothing answers
        if self._closed or client not in self._sockets:
            client.close()
            return
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            client.close()
            return
        with self._lock:
            self._sockets.add(server)
        with contextlib.suppress(OSError, ValueError):  # ValueError: a socket closed by cut()
            for source, data in self._pump(client, server):
                self._forwarding.wait()  # cut mid-stream: the bytes stop here
                (server if source is client else client).sendall(data)
        for sock in (client, server):
            with contextlib.suppress(OSError):
                sock.close()

    def _pump(
        self, client: socket.socket, server: socket.socket
    ) -> Iterator[tuple[socket.socket, bytes]]:
        pair = [client, server]
        while True:
            readable, _, _ = select.select(pair, [], [], 1.0)
            for sock in readable:
                data = sock.recv(65536)
                if not data:
                    return
                yield sock, data
