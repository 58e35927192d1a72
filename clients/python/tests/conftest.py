"""Fixtures: a real `moat serve` daemon on a free loopback port.

The binary is $MOAT_BIN, or <repo>/build/san/moat, or <repo>/build/moat.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package under test, not an installed one

REPO = HERE.parent.parent.parent


def _moat_bin() -> str:
    env = os.environ.get("MOAT_BIN")
    if env:
        return env
    cands = [REPO / "build" / "san", REPO / "build"]
    # Prefer a directory that has the daemon next to the CLI.
    for d in cands:
        if (d / "moat").exists() and (d / "moat-serve").exists():
            return str(d / "moat")
    for d in cands:
        if (d / "moat").exists():
            return str(d / "moat")
    pytest.exit("no moat binary: set MOAT_BIN or run make", returncode=2)
    raise AssertionError  # unreachable


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Sanitizer reports in the daemon's log are daemon bugs worth seeing.
_SAN_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                "runtime error:")


class Daemon:
    def __init__(self, token: str | None = None, args: tuple = (),
                 host_files: dict | None = None):
        self.bin = _moat_bin()
        self.tmp = tempfile.mkdtemp(prefix="moat-pytest-")
        # A host directory the daemon may copy from (--allow-host-path).
        self.host_dir = os.path.join(self.tmp, "host")
        os.makedirs(self.host_dir)
        os.chmod(self.tmp, 0o755)
        for rel, data in (host_files or {}).items():
            full = os.path.join(self.host_dir, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "wb") as f:
                f.write(data)
        args = tuple(a.replace("{host}", self.host_dir) for a in args)
        self.data = os.path.join(self.tmp, "data")
        self.log_path = os.path.join(self.tmp, "serve.log")
        self.port = _free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.token = token
        env = dict(os.environ)
        env.pop("MOAT_API_TOKEN", None)
        env.pop("MOAT_URL", None)
        if token:
            env["MOAT_API_TOKEN"] = token
        # Leak reports at exit are noisy for a daemon killed by a signal.
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [self.bin, "serve", "--listen", "127.0.0.1:%d" % self.port,
             "--data", self.data, *args],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True)
        self._wait_ready()

    def log_text(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                pytest.fail("moat serve exited with %s at start:\n%s"
                            % (self.proc.returncode, self.log_text()[-4000:]))
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                    if r.status == 200 and json.loads(r.read()).get("ok") is True:
                        return
            except (OSError, ValueError, urllib.error.URLError) as e:
                last = e
            time.sleep(0.1)
        self.stop()
        pytest.fail("moat serve did not answer /healthz within %ss (%s):\n%s"
                    % (timeout, last, self.log_text()[-4000:]))

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        text = self.log_text()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return text


def _stop_and_check(d: Daemon) -> None:
    text = d.stop()
    bad = [m for m in _SAN_MARKERS if m in text]
    if bad and not os.environ.get("MOAT_TEST_IGNORE_SAN"):
        pytest.fail("moat serve log has sanitizer reports (%s):\n%s"
                    % (", ".join(bad), text[-8000:]))


@pytest.fixture(scope="session")
def daemon():
    d = Daemon()
    yield d
    _stop_and_check(d)


@pytest.fixture(scope="session")
def token_daemon():
    d = Daemon(token="s3cret-" + uuid.uuid4().hex)
    yield d
    _stop_and_check(d)


@pytest.fixture(scope="session")
def limited_daemon():
    """Small limits and one allowed host directory."""
    d = Daemon(args=("--max-sandboxes", "2", "--max-file", "64K",
                     "--max-archive", "256K", "--allow-host-path", "{host}"),
               host_files={"data.csv": b"a,b\n1,2\n",
                           "lib/util.py": b"X = 42\n",
                           "lib/sub/deep.txt": b"deep\n"})
    yield d
    _stop_and_check(d)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """The client reads MOAT_URL / MOAT_API_TOKEN: keep the caller's out."""
    monkeypatch.delenv("MOAT_URL", raising=False)
    monkeypatch.delenv("MOAT_API_TOKEN", raising=False)


@pytest.fixture
def url(daemon):
    return daemon.url


@pytest.fixture
def sb(daemon):
    from moat import NotFound, Sandbox
    s = Sandbox.create(url=daemon.url, metadata={"test": "pytest"})
    yield s
    try:
        s.delete()
    except NotFound:
        pass
