"""The built-in console (`/ui`) in a real headless Chromium against the real binary: each
view renders real data (topics, partitions, brokers, a consumer group with its members and
lag, a record's value), screenshots land in tests/e2e/artifacts/console/, and the topic
view's load time with 1,000 partitions is measured and printed.

Chromium is Debian's `chromium` (scripts/test.sh installs it); without it the test skips.
`--dump-dom` with a virtual-time budget returns once the page's fetches settled, so the
DOM it prints is what a person would see."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests
from confluent_kafka import TopicPartition

from helpers import consumer, create_topic, produce_all, producer, unique, wait_until

pytestmark = pytest.mark.oxbow_only

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).parent / "artifacts" / "console"
T = 30


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        # Run the page's timers and wait for its fetches (virtual time stops while a
        # request is in flight) before dumping or shooting.
        "--virtual-time-budget=8000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True)


def dom(url: str) -> str:
    out = chromium("--dump-dom", url).stdout
    assert 'data-ready="1"' in out, f"{url} did not render its data:\n{out[-3000:]}"
    return out


def screenshot(url: str, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    chromium(f"--screenshot={path}", "--window-size=1280,900", url)
    assert path.stat().st_size > 5000, f"{path} is (nearly) empty"
    return path


def text(html: str) -> str:
    """The visible text of a DOM dump, tags removed (for number and phrase checks)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`; scripts/test.sh installs it)")
def test_console_pages_render_real_data(broker):
    http, bootstrap = broker.http, broker.bootstrap
    ui = f"{http}/ui"
    orders, audit = unique("orders"), unique("audit")
    group = unique("billing")
    create_topic(bootstrap, orders, partitions=3)
    create_topic(bootstrap, audit, partitions=1)
    p = producer(bootstrap)
    produce_all(p, orders, [{"key": f"k{i}", "value": json.dumps({"n": i, "item": "apple"}), "partition": i % 3} for i in range(30)])
    binary = bytes(range(256))[::-1][:16]
    produce_all(p, audit, [{"key": "who", "value": json.dumps({"user": "ada", "action": "login"})}, {"value": binary}])

    # A group member that reads, then commits offset 3 of each partition: 3 × 7 records
    # behind. It stays a member (polling, paused) while the pages are loaded.
    c = consumer(bootstrap, **{"group.id": group, "client.id": "billing-client"})
    c.subscribe([orders])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen += 1
    assert seen >= 10, f"consumed only {seen}"
    c.commit(offsets=[TopicPartition(orders, part, 3) for part in range(3)], asynchronous=False)
    stop = threading.Event()

    def keep_member():
        # Pausing leaves the committed offsets as they are while the member stays alive.
        c.pause(c.assignment())
        while not stop.is_set():
            c.poll(0.2)

    keeper = threading.Thread(target=keep_member, daemon=True)
    keeper.start()
    try:
        cluster = requests.get(f"{http}/v3/clusters", timeout=T).json()["data"][0]["cluster_id"]
        summary_url = f"{http}/v3/clusters/{cluster}/consumer-groups/{group}/lag-summary"
        # The lag the page must show, once the broker sampled it twice (the chart's points).
        summary = wait_until(
            lambda: (s := requests.get(summary_url, timeout=T).json()) and len(s.get("lag_history", [])) >= 2 and s,
            timeout=30,
            what="two lag samples",
        )
        total_lag = summary["total_lag"]
        assert total_lag == 3 * (10 - 3), summary

        # Brokers: this broker, its lease, and the partitions it leads.
        html = dom(f"{ui}#/brokers")
        assert 'data-broker="1"' in html
        assert "valid" in text(html) and "this broker" in text(html)
        screenshot(f"{ui}#/brokers", "brokers")

        # Topics, then one topic's partitions with leaders and in-sync state.
        html = dom(f"{ui}#/topics")
        assert f'data-topic="{orders}"' in html and f'data-topic="{audit}"' in html
        screenshot(f"{ui}#/topics", "topics")
        html = dom(f"{ui}#/topics/{orders}")
        for part in range(3):
            assert f'data-partition="{part}"' in html
        assert "in sync" in text(html)
        screenshot(f"{ui}#/topics/{orders}", "topic-partitions")

        # Groups: the group, its member (client id), the lag per partition and in total.
        html = dom(f"{ui}#/groups")
        assert f'data-group="{group}"' in html
        html = dom(f"{ui}#/groups/{group}")
        page = text(html)
        assert "billing-client" in page
        assert re.search(r'id="total-lag"[^>]*>\s*' + f"{total_lag:,}", html), page[:2000]
        assert "STABLE" in page
        assert "<polyline" in html, "no lag chart"
        assert 'data-lag="' in html
        screenshot(f"{ui}#/groups/{group}", "group")

        # Record browser: JSON pretty-printed, binary shown as such.
        html = dom(f"{ui}#/records/{audit}/0?offset=0")
        page = text(html)
        assert '"user": "ada"' in html.replace("&quot;", '"'), page[:2000]
        assert "binary" in page
        assert base64.b64encode(binary).decode() in html
        screenshot(f"{ui}#/records/{audit}/0?offset=0", "records")
        # By time: from the first record's timestamp, the first record.
        first = requests.get(
            f"{http}/topics/{audit}/partitions/0/records",
            params={"offset": 0, "timeout": 0, "timestamps": "true"},
            timeout=T,
        ).json()[0]
        html = dom(f"{ui}#/records/{audit}/0?timestamp={first['timestamp']}")
        assert 'data-offset="0"' in html
    finally:
        stop.set()
        keeper.join(timeout=10)
        c.close()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian package `chromium`; scripts/test.sh installs it)")
def test_console_with_1000_partitions_loads_quickly(broker):
    http, bootstrap = broker.http, broker.bootstrap
    big = unique("big")
    create_topic(bootstrap, big, partitions=1000, timeout=120)
    produce_all(producer(bootstrap), big, [{"value": f"v{i}", "partition": i} for i in range(0, 1000, 97)])
    cluster = requests.get(f"{http}/v3/clusters", timeout=T).json()["data"][0]["cluster_id"]

    started = time.monotonic()
    r = requests.get(f"{http}/v3/clusters/{cluster}/topics/{big}/partitions", timeout=T)
    json_s = time.monotonic() - started
    assert r.status_code == 200 and len(r.json()["data"]) == 1000

    # Chromium's own start-up, to tell it apart from the page.
    started = time.monotonic()
    chromium("--dump-dom", "about:blank")
    blank_s = time.monotonic() - started

    timings = []
    for _ in range(3):
        started = time.monotonic()
        html = dom(f"{http}/ui#/topics/{big}")
        timings.append(time.monotonic() - started)
        # One page of the table is rendered, not 1,000 rows.
        assert "page 1 of 20" in text(html)
        assert html.count("data-partition=") == 50
    screenshot(f"{http}/ui#/topics/{big}", "topic-1000-partitions")
    best = min(timings)
    print(
        f"\nconsole topic view, 1,000 partitions: {best:.2f}s to rendered data in headless Chromium "
        f"(runs {', '.join(f'{t:.2f}' for t in timings)} s; Chromium alone on about:blank {blank_s:.2f}s; "
        f"partitions JSON {len(r.content) / 1024:.0f} KiB in {json_s * 1000:.0f} ms)"
    )
    assert best < 15, f"the topic view took {best:.1f}s with 1,000 partitions"
