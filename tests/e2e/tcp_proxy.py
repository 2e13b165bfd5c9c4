"""A TCP proxy on a loopback port of its own, for e2e tests that cut a broker off from a
server (S3, a mirror source, etcd): `cut()` closes its listening socket (new connects are
refused) and resets every live connection; `restore()` listens again on the same port;
`request_delay` holds what goes upstream that many seconds (a slow link to the server)."""

from __future__ import annotations

import queue
import socket
import threading
import time

from brokers import free_ports


class CuttableProxy:
    """A TCP proxy on a fixed loopback port to `upstream`. cut(): the listening socket is
    closed (new connects are refused) and every live connection is reset; restore(): it
    listens again on the same port."""

    def __init__(self, upstream_port: int):
        self.upstream = ("127.0.0.1", upstream_port)
        (self.port,) = free_ports(1)
        self.lock = threading.Lock()
        self.conns: set[socket.socket] = set()
        self.listener: socket.socket | None = None
        self.closed = False
        # Request heads (lower-cased) of the PUTs seen going upstream.
        self.put_heads: list[str] = []
        # Seconds each chunk going upstream is held before it is sent on (answers are not).
        self.request_delay = 0.0
        self.restore()

    def restore(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        deadline = time.monotonic() + 10
        while True:
            try:
                s.bind(("127.0.0.1", self.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        s.listen(128)
        with self.lock:
            self.listener = s
        threading.Thread(target=self._accept, args=(s,), daemon=True).start()

    def cut(self) -> None:
        with self.lock:
            listener, self.listener = self.listener, None
            conns, self.conns = self.conns, set()
        if listener is not None:
            listener.close()
        for c in conns:
            try:
                # RST rather than FIN: the client sees the connection die mid-request.
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                c.close()
            except OSError:
                pass

    def close(self) -> None:
        self.closed = True
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self.lock:
                if self.listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self.conns |= {client, upstream}
            for a, b, up in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pipe, args=(a, b, up), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        # Going upstream, chunks pass through a queue to a sender that holds each until it
        # is due (in order: a constant delay, not a throttle).
        held: queue.Queue | None = None
        if upstream:
            held = queue.Queue()
            threading.Thread(target=self._send_when_due, args=(held, dst), daemon=True).start()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if held is None:
                    dst.sendall(data)
                    continue
                if data.startswith(b"PUT "):
                    with self.lock:
                        self.put_heads.append(data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower())
                held.put((time.monotonic() + self.request_delay, data))
        except OSError:
            pass
        finally:
            if held is not None:
                held.put(None)  # the sender closes `dst` once it has sent what was held
            else:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                with self.lock:
                    self.conns.discard(src)
                    self.conns.discard(dst)

    def _send_when_due(self, held: queue.Queue, dst: socket.socket) -> None:
        try:
            while (item := held.get()) is not None:
                due, data = item
                time.sleep(max(0.0, due - time.monotonic()))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            with self.lock:
                self.conns.discard(dst)
