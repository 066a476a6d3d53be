"""A TCP proxy between the object-storage client and the S3 server of the tests (tests/s3server.py) that does to
chosen requests what a network and a busy S3 do: it cuts a connection in the middle of an upload or a download,
loses the answer of a request the server applied, or answers 503 SlowDown without passing the request on. The
client's bytes go over real sockets to a real server; nothing of the client library is replaced.

One request per client connection: the proxy reads the request (its head and its Content-Length body), passes it
to the server on a connection of its own with `Connection: close`, and sends back what the server answered, then
closes; the client opens a new connection for its next request, as it would after any `Connection: close`."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections import Counter
from dataclasses import dataclass

SLOWDOWN = b"""<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"""

ACTIONS = ("cut_upload", "cut_download", "lose_response", "slowdown")


@dataclass
class Fault:
    """`action` for the next `times` requests whose method is `method` (any when None) and whose path holds
    `path` (any when None)."""

    action: str
    method: str | None = None
    path: str | None = None
    times: int = 1

    def matches(self, method: str, target: str) -> bool:
        return self.times > 0 and (self.method is None or self.method == method) and (
            self.path is None or self.path in target)


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """(the head up to its blank line, the bytes read after it); (b"", b"") when the peer closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = sock.recv(65536)
        if not got:
            return b"", b""
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return None


def _closing(head: bytes) -> bytes:
    """The request's head with `Connection: close` in place of any Connection header."""
    lines = [ln for ln in head.rstrip(b"\r\n").split(b"\r\n") if not ln.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close"]) + b"\r\n\r\n"


class FaultProxy:
    """`endpoint`: the URL to give the client instead of the server's. `fail(...)` queues faults; `injected`
    counts those done, `requests` every (method, path, time.monotonic()) that came through."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").rstrip("/").split(":")
        self.upstream = (host, int(port))
        self.faults: list[Fault] = []
        self.injected: Counter[str] = Counter()
        self.requests: list[tuple[str, str, float]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, action: str, method: str | None = None, path: str | None = None, times: int = 1) -> None:
        assert action in ACTIONS, action
        with self._lock:
            self.faults.append(Fault(action, method, path, times))

    def pending(self) -> int:
        """Faults queued and not yet done."""
        with self._lock:
            return sum(f.times for f in self.faults)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _choose(self, method: str, target: str) -> str | None:
        with self._lock:
            self.requests.append((method, target, time.monotonic()))
            for f in self.faults:
                if f.matches(method, target):
                    f.times -= 1
                    self.injected[f.action] += 1
                    return f.action
        return None

    def _serve(self, client: socket.socket) -> None:
        with client:
            head, body = _read_head(client)
            if not head:
                return
            method, target = head.split(b" ", 2)[:2]
            action = self._choose(method.decode(), target.decode())
            want = _length(head) or 0
            if action == "slowdown":
                client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: "
                               + str(len(SLOWDOWN)).encode() + b"\r\nConnection: close\r\n\r\n" + SLOWDOWN)
                return
            if action == "cut_upload":  # half the body reaches the server, then both connections end
                while len(body) < want // 2:
                    got = client.recv(65536)
                    if not got:
                        break
                    body += got
                with socket.create_connection(self.upstream) as server:
                    server.sendall(_closing(head) + body[:want // 2])
                client.shutdown(socket.SHUT_RDWR)
                return
            while len(body) < want:
                got = client.recv(65536)
                if not got:
                    return
                body += got
            with socket.create_connection(self.upstream) as server:
                server.sendall(_closing(head) + body)
                answer = b""
                while got := server.recv(65536):
                    answer += got
            if action == "lose_response":  # the server applied it; the client never hears so
                client.shutdown(socket.SHUT_RDWR)
                return
            if action == "cut_download":  # the head and half the body, then the connection ends
                rhead, _, rbody = answer.partition(b"\r\n\r\n")
                client.sendall(rhead + b"\r\n\r\n" + rbody[:len(rbody) // 2])
                client.shutdown(socket.SHUT_RDWR)
                return
            client.sendall(answer)
