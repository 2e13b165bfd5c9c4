"""HTTP API authentication (`--http-authentication basic,bearer`): Basic against the SCRAM
users Kafka SASL uses (`oxbow users`), Bearer JWTs validated by the OAUTHBEARER settings
(`--sasl-oauthbearer-jwks-endpoint-url`, a JWKS file here), 401/40101 with
`WWW-Authenticate`, open probe paths, and the ACL check of the authenticated principal.

Oxbow only: Kafka has no HTTP API (its REST Proxy is a separate product)."""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from brokers import TARGET, oxbow_bin
from helpers import admin, create_topic, run, unique, wait_until

pytestmark = pytest.mark.skipif(TARGET == "kafka", reason="Kafka has no HTTP API")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def int_b64(n: int) -> str:
    return b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class Issuer:
    """An RSA key and its JWKS; signs RS256 tokens (no JWT library needed)."""

    def __init__(self, kid: str = "k1"):
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict:
        pub = self.key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "kid": self.kid, "alg": "RS256", "use": "sig", "n": int_b64(pub.n), "e": int_b64(pub.e)}]}

    def token(self, sub: str, exp_in: float = 300, **claims) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        payload = {"sub": sub, "iat": now, "exp": int(now + exp_in), **claims}
        signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
        sig = self.key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{b64url(sig)}"


ISSUER = Issuer()


def oxbow_users(bootstrap: str, *args: str, input: str | None = None):
    return run([str(oxbow_bin()), "users", "-b", bootstrap, *args], input=input, timeout=60)


@pytest.fixture(scope="module")
def auth_broker(module_broker_factory, tmp_path_factory):
    jwks = tmp_path_factory.mktemp("jwks") / "jwks.json"
    jwks.write_text(json.dumps(ISSUER.jwks()))
    b = module_broker_factory(
        extra_args=[
            "--http-authentication", "basic,bearer",
            "--sasl-oauthbearer-jwks-endpoint-url", str(jwks),
            "--sasl-oauthbearer-clock-skew", "0s",
            "--authorizer", "acl", "--allow-everyone-if-no-acl-found",
        ]
    )
    oxbow_users(b.bootstrap, "create", "alice", "--mechanism", "SCRAM-SHA-256", input="alice-secret\n")
    return b


def get(b, path: str, **kw) -> requests.Response:
    return requests.get(f"{b.http}{path}", timeout=30, **kw)


def assert_401(r: requests.Response, invalid_token: bool = False) -> None:
    assert r.status_code == 401, (r.status_code, r.text)
    assert r.json()["error_code"] == 40101, r.text
    challenge = r.headers.get("WWW-Authenticate", "")
    assert 'Basic realm="oxbow"' in challenge, challenge
    assert 'Bearer realm="oxbow"' in challenge, challenge
    assert ('error="invalid_token"' in challenge) == invalid_token, challenge


def test_open_paths_need_no_credentials(auth_broker):
    for path in ("/healthz", "/readyz", "/metrics"):
        assert get(auth_broker, path).status_code == 200, path


def test_no_or_malformed_credentials_are_401_with_challenges(auth_broker):
    assert_401(get(auth_broker, "/topics"))
    assert_401(get(auth_broker, "/no/such/endpoint"))
    assert_401(get(auth_broker, "/topics", headers={"Authorization": "Basic !!!"}))
    assert_401(get(auth_broker, "/topics", headers={"Authorization": "Digest username=alice"}))
    nocolon = base64.b64encode(b"alice").decode()
    assert_401(get(auth_broker, "/topics", headers={"Authorization": f"Basic {nocolon}"}))


def test_basic_good_bad_password_unknown_user(auth_broker):
    assert get(auth_broker, "/topics", auth=("alice", "alice-secret")).status_code == 200
    # Remembered login: the second request is served too.
    assert get(auth_broker, "/topics", auth=("alice", "alice-secret")).status_code == 200
    assert_401(get(auth_broker, "/topics", auth=("alice", "wrong")))
    assert_401(get(auth_broker, "/topics", auth=("nobody", "alice-secret")))


def test_a_password_change_takes_effect_at_once(auth_broker):
    user = unique("pwchange")
    oxbow_users(auth_broker.bootstrap, "create", user, "--mechanism", "SCRAM-SHA-512", input="first\n")
    assert get(auth_broker, "/topics", auth=(user, "first")).status_code == 200
    oxbow_users(auth_broker.bootstrap, "create", user, "--mechanism", "SCRAM-SHA-512", input="second\n")
    assert_401(get(auth_broker, "/topics", auth=(user, "first")))
    assert get(auth_broker, "/topics", auth=(user, "second")).status_code == 200
    oxbow_users(auth_broker.bootstrap, "delete", user)
    assert_401(get(auth_broker, "/topics", auth=(user, "second")))


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def test_bearer_good_expired_forged(auth_broker):
    assert get(auth_broker, "/topics", headers=bearer(ISSUER.token("svc"))).status_code == 200
    assert_401(get(auth_broker, "/topics", headers=bearer(ISSUER.token("svc", exp_in=-60))), invalid_token=True)
    forger = Issuer(kid=ISSUER.kid)
    assert_401(get(auth_broker, "/topics", headers=bearer(forger.token("svc"))), invalid_token=True)
    assert_401(get(auth_broker, "/topics", headers=bearer("not.a.jwt")), invalid_token=True)


def test_acls_apply_to_the_authenticated_principal(auth_broker):
    topic = unique("authz")
    create_topic(auth_broker.bootstrap, topic)
    client = admin(auth_broker.bootstrap)

    def acl(principal: str, op) -> AclBinding:
        return AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW
        )

    # An ACL for someone else closes the topic to alice and to the token's subject.
    for f in client.create_acls([acl("User:owner", AclOperation.ALL)], request_timeout=30).values():
        f.result(timeout=30)
    r = get(auth_broker, f"/topics/{topic}", auth=("alice", "alice-secret"))
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    assert "User:alice" in r.json()["message"], r.text
    r = get(auth_broker, f"/topics/{topic}", headers=bearer(ISSUER.token("svc")))
    assert r.status_code == 403 and "User:svc" in r.json()["message"], r.text
    # Allowing alice opens it to her only.
    for f in client.create_acls([acl("User:alice", AclOperation.DESCRIBE)], request_timeout=30).values():
        f.result(timeout=30)
    wait_until(
        lambda: get(auth_broker, f"/topics/{topic}", auth=("alice", "alice-secret")).status_code == 200,
        timeout=15,
        what="alice's ACL to apply",
    )
    assert get(auth_broker, f"/topics/{topic}", headers=bearer(ISSUER.token("svc"))).status_code == 403


def test_failures_are_counted(auth_broker):
    def failures(scheme: str) -> float:
        for line in get(auth_broker, "/metrics").text.splitlines():
            if line.startswith(f'oxbow_http_authentication_failures_total{{scheme="{scheme}"}}'):
                return float(line.split()[-1])
        raise AssertionError("metric missing")

    before = {s: failures(s) for s in ("none", "basic", "bearer")}
    get(auth_broker, "/topics")
    get(auth_broker, "/topics", auth=("alice", "wrong"))
    get(auth_broker, "/topics", headers=bearer("x.y.z"))
    for s in ("none", "basic", "bearer"):
        assert failures(s) == before[s] + 1, s


def test_authentication_off_is_as_before(broker):
    assert get(broker, "/topics").status_code == 200
    # Credentials are ignored when nothing asks for them.
    assert get(broker, "/topics", auth=("nobody", "x")).status_code == 200


def test_bearer_without_a_jwks_stops_the_start(broker_factory):
    b = broker_factory(start=False, extra_args=["--http-authentication", "bearer"])
    b.start(wait=False)
    code = b.proc.wait(30)
    assert code != 0
    log = b.log_path.read_text()
    assert "--http-authentication" in log and "--sasl-oauthbearer-jwks-endpoint-url" in log, log[-2000:]
