"""SASL handshake time: connect -> authenticated, SCRAM-SHA-256 and SCRAM-SHA-512, over raw
sockets (a hand-written SCRAM client, RFC 5802, so the figure has no client library's
start-up in it). Prints median and p99 per mechanism.

    python sasl_handshake_time.py SASL_BOOTSTRAP USER PASSWORD [CONNECTIONS]

The user needs credentials of both mechanisms (e.g. `oxbow users create alice --mechanism
SCRAM-SHA-256 --iterations 4096` and the same with SCRAM-SHA-512). The client's own
Hi() (4096 PBKDF2 iterations in Python's hashlib, ~1-3 ms) is part of the figure, as it is
of every real login.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import statistics
import sys
import time

import kafka_wire as kw

API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36


def authenticate(c: kw.KafkaConn, body: bytes) -> bytes:
    r = kw.Reader(c.call(API_SASL_AUTHENTICATE, 1, kw.bytes_field(body)))
    err, message = r.int16(), r.string()
    token = r.take(r.int32())
    if err:
        raise RuntimeError(f"SaslAuthenticate error {err}: {message}")
    return token


def login(bootstrap: str, mechanism: str, user: str, password: str) -> float:
    """Seconds from connect to the verified server-final message."""
    h = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    started = time.perf_counter()
    with kw.KafkaConn(bootstrap) as c:
        r = kw.Reader(c.call(API_SASL_HANDSHAKE, 1, kw.string(mechanism)))
        assert r.int16() == 0
        cnonce = base64.b64encode(os.urandom(18)).decode()
        bare = f"n={user},r={cnonce}"
        server_first = authenticate(c, f"n,,{bare}".encode()).decode()
        attrs = dict(a.split("=", 1) for a in server_first.split(","))
        salt, iterations, nonce = base64.b64decode(attrs["s"]), int(attrs["i"]), attrs["r"]
        salted = hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", h).digest()
        stored_key = hashlib.new(h, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{bare},{server_first},{without_proof}".encode()
        signature = hmac.new(stored_key, auth_message, h).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        final = authenticate(c, f"{without_proof},p={base64.b64encode(proof).decode()}".encode()).decode()
        server_key = hmac.new(salted, b"Server Key", h).digest()
        expected = base64.b64encode(hmac.new(server_key, auth_message, h).digest()).decode()
        assert final == f"v={expected}", "server signature does not verify"
    return time.perf_counter() - started


def main() -> None:
    bootstrap, user, password = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        login(bootstrap, mechanism, user, password)  # warm-up
        times = sorted(login(bootstrap, mechanism, user, password) for _ in range(n))
        p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
        print(f"{mechanism}: {n} connections, median {statistics.median(times) * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms")


if __name__ == "__main__":
    main()
