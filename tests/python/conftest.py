"""Fixtures: a tierpoold of the build under test on a temporary socket, stopped afterwards.

ctest sets TIERPOOLD (the daemon) and PYTHONPATH (the built package)."""

import os
import subprocess
import tempfile
import time

import pytest

import tierpool


def start_server(*extra, dram="256M", hbm="64M"):
    tierpoold = os.environ.get("TIERPOOLD")
    if not tierpoold:
        pytest.skip("TIERPOOLD is not set (run through ctest)")
    d = tempfile.mkdtemp(prefix="tierpool-py-")
    sock = os.path.join(d, "tierpool.sock")
    proc = subprocess.Popen([tierpoold, "--socket", sock, "--dram", dram, "--hbm", hbm,
                             "--no-populate", "--log-level", "warn", *extra])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("tierpoold exited with %d" % proc.returncode)
        try:
            tierpool.Client(sock).close()
            return proc, sock
        except tierpool.Unavailable:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("tierpoold did not start")


def stop_server(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def server():
    proc, sock = start_server()
    yield sock
    stop_server(proc)


@pytest.fixture
def client(server, request):
    ns = request.node.name.replace("[", "_").replace("]", "")[:60]
    with tierpool.Client(server, ns) as c:
        yield c


def wait_for(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()
