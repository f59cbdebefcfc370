"""tierpoold's /metrics and /health over HTTP: parsed by the Prometheus client's own text
parser, with the counters checked after known traffic; bad --metrics-listen values."""

import json
import os
import socket
import subprocess
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import tierpool
from conftest import start_server, stop_server


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def metrics_server():
    port = free_port()
    proc, sock = start_server("--metrics-listen", "127.0.0.1:%d" % port, dram="64M", hbm="16M")
    yield sock, "http://127.0.0.1:%d" % port
    stop_server(proc)


def fetch(url, method="GET"):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def scrape(base):
    status, headers, body = fetch(base + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    types = {}
    for family in text_string_to_metric_families(body):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types


def test_metrics_count_known_traffic(metrics_server):
    sock, base = metrics_server
    before, types = scrape(base)
    with tierpool.Client(sock, "metrics") as c:
        for i in range(10):
            c.put("k%d" % i, bytes(4096))
        for i in range(3):
            assert c.get("k%d" % i) == bytes(4096)
        c.delete("k0")
        with pytest.raises(tierpool.NotFound):
            c.get("absent")
        after, types = scrape(base)
    delta = lambda name: after[(name, ())] - before.get((name, ()), 0)  # noqa: E731
    assert delta("tierpool_puts_total") == 10
    assert delta("tierpool_put_bytes_total") == 10 * 4096
    assert delta("tierpool_gets_total") == 4
    assert delta("tierpool_get_misses_total") == 1
    assert delta("tierpool_deletes_total") == 1
    assert after[("tierpool_objects", ())] - before[("tierpool_objects", ())] == 9
    assert types["tierpool_puts"] == "counter" and types["tierpool_objects"] == "gauge"
    dram = (("tier", "dram"),)
    assert after[("tierpool_tier_capacity_bytes", dram)] == 64 << 20
    assert after[("tierpool_tier_used_bytes", dram)] >= 9 * 4096
    assert after[("tierpool_tier_state", (("state", "ok"), ("tier", "dram")))] == 1
    assert after[("tierpool_connections_active", ())] >= 1
    assert after[("tierpool_uptime_seconds", ())] > 0
    assert any(n == "tierpool_build_info" for n, _ in after)
    # Latency histograms: every put (inline, or reserve + commit) and get of this test counted.
    assert types["tierpool_request_duration_seconds"] == "histogram"

    def hist_delta(op, size):
        key = ("tierpool_request_duration_seconds_count",
               tuple(sorted({"op": op, "size_le_bytes": size}.items())))
        return after.get(key, 0) - before.get(key, 0)
    puts = hist_delta("put", "4096") + hist_delta("reserve", "4096")
    assert puts == 10, puts
    assert hist_delta("get", "4096") == 4
    buckets = sorted(((float(dict(labels)["le"]), v) for (n, labels), v in after.items()
                      if n == "tierpool_request_duration_seconds_bucket"
                      and dict(labels)["op"] == "get" and dict(labels)["size_le_bytes"] == "4096"))
    counts = [v for _, v in buckets]
    assert counts == sorted(counts) and buckets[-1][0] == float("inf")
    assert counts[-1] == after[("tierpool_request_duration_seconds_count",
                                (("op", "get"), ("size_le_bytes", "4096")))]


def test_health_and_http_errors(metrics_server):
    _, base = metrics_server
    status, headers, body = fetch(base + "/health")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"status": "ok", "reasons": []}
    assert fetch(base + "/health", "HEAD")[0] == 200
    assert fetch(base + "/nothing")[0] == 404
    assert fetch(base + "/metrics", "POST")[0] == 405
    # A client that connects and says nothing does not stop the others.
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1]))):
        assert fetch(base + "/metrics")[0] == 200


def test_bad_listen_addresses_are_clear_errors(tmp_path):
    tierpoold = os.environ.get("TIERPOOLD")
    if not tierpoold:
        pytest.skip("TIERPOOLD is not set (run through ctest)")
    for bad in ("9464", "localhost:9464", "127.0.0.1:99999"):
        r = subprocess.run([tierpoold, "--socket", str(tmp_path / "s.sock"), "--dram", "16M",
                            "--hbm", "0", "--no-populate", "--metrics-listen", bad],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (bad, r.stderr)
        assert "listen address" in r.stderr, r.stderr
    # An address given explicitly that cannot be bound stops the start.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = subprocess.run([tierpoold, "--socket", str(tmp_path / "s2.sock"), "--dram", "16M",
                            "--hbm", "0", "--no-populate", "--metrics-listen",
                            "127.0.0.1:%d" % busy.getsockname()[1]],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, r.stderr
        assert "cannot listen for metrics" in r.stderr
