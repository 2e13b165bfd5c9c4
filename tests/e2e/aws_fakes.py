"""Local stand-ins for the two AWS interfaces the broker instances' scripts use, so the
scripts under terraform/modules/brokers/files/ run here unchanged:

- `FakeImds`: the EC2 instance metadata service, IMDSv2 only (a GET without a token from
  PUT /latest/api/token is refused with 401, as on an instance with http_tokens=required).
  `items` maps meta-data paths (e.g. "placement/availability-zone-id") to values and can
  be changed while it runs (e.g. autoscaling/target-lifecycle-state -> "Terminated").
- `fake_aws_cli(dir)`: an `aws` executable that records each call's arguments as one JSON
  line (with the time it was made) in `dir/aws-calls.jsonl` and succeeds.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class FakeImds:
    def __init__(self, items: dict[str, str]):
        self.items = dict(items)
        self.tokens: set[str] = set()
        self.refused = 0
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, code: int, body: str = "") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self):
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    token = secrets.token_hex(16)
                    imds.tokens.add(token)
                    self._send(200, token)
                else:
                    self._send(400)

            def do_GET(self):
                if self.headers.get("X-aws-ec2-metadata-token") not in imds.tokens:
                    imds.refused += 1
                    self._send(401)
                    return
                prefix = "/latest/meta-data/"
                key = self.path[len(prefix):] if self.path.startswith(prefix) else None
                if key is None or key not in imds.items:
                    self._send(404)
                else:
                    self._send(200, imds.items[key])

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fake_aws_cli(directory: Path) -> Path:
    """Writes `directory/bin/aws`; returns the calls file it appends to."""
    bin_dir = Path(directory) / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    calls = Path(directory) / "aws-calls.jsonl"
    script = bin_dir / "aws"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, time\n"
        f"with open({str(calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps({'t': time.monotonic(), 'args': sys.argv[1:]}) + '\\n')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return calls


def read_calls(calls: Path) -> list[dict]:
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text().splitlines() if line.strip()]


def arg(call: dict, flag: str) -> str | None:
    """The value after `flag` in a recorded call's arguments."""
    args = call["args"]
    return args[args.index(flag) + 1] if flag in args else None


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def now() -> float:
    """The clock the fake aws CLI stamps calls with (monotonic, comparable across processes)."""
    return time.monotonic()
