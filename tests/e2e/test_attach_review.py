"""The attach door against hostile or broken clients (a review of it): floods
that must not grow the daemon without bound, clients that vanish or stall
in the middle of a frame and must not hold a process's one attach forever,
handshakes and browser pages that must not get in. The daemon must keep
serving /v1 throughout.
"""
import json
import os
import socket
import struct

import pytest

from conftest import wait_until
from test_attach import TIMEOUT, WS, api, attach, masked, procs, running, start
from test_client import Daemon, moat

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(os.environ.get("MOAT_BIN", "")), "moat-client"),
                  os.X_OK),
    reason="moat-client not found")


def daemon_with(env):
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return Daemon()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def daemon():
    # Memory is measured: ASan's quarantine (freed memory kept back) off,
    # so that what the daemon holds is what it uses. Pings every 3 s (a
    # silent client goes after 3 of them), for the clients that stall.
    asan = os.environ.get("ASAN_OPTIONS", "")
    d = daemon_with({"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=0",
                     "MOAT_TEST_ATTACH_PING_S": "3"})
    yield d
    d.stop()
    assert "ERROR: AddressSanitizer" not in d.output(), d.output()[-4000:]


@pytest.fixture
def box(daemon):
    r = moat(daemon.url, "create")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    yield sid
    moat(daemon.url, "rm", sid)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) >> 10
    raise AssertionError("no VmRSS")


def serving(d, sid):
    """The daemon still answers /v1 (and still has the sandbox)."""
    assert sid in [b["id"] for b in api(d, "GET", "/v1/sandboxes")["sandboxes"]]


def flood(w, chunk, total):
    """Send chunk until total bytes went or the daemon stops taking them
    (a send blocked for a while: its reading stopped; or the connection
    reset: it let go of a client that took nothing). Returns bytes sent."""
    w.s.settimeout(15)
    sent = 0
    try:
        while sent < total:
            w.s.sendall(chunk)
            sent += len(chunk)
    except (socket.timeout, TimeoutError, ConnectionResetError, BrokenPipeError):
        pass
    return sent


FLOOD = 96 << 20
GROWTH_MAX_MIB = 48  # the daemon's buffers are bounded at a few MiB


def assert_flood_bounded(daemon, box, pid, data):
    """Flood an attach of pid with data (repeated for FLOOD bytes): the
    daemon grows by less than GROWTH_MAX_MIB, keeps serving, and the
    process keeps running; then it is killed."""
    w = attach(daemon, box, pid)
    assert w.status == 101
    before = rss_mib(daemon.proc.pid)
    flood(w, data, FLOOD)
    grew = rss_mib(daemon.proc.pid) - before
    assert grew < GROWTH_MAX_MIB, f"the daemon grew by {grew} MiB"
    serving(daemon, box)
    w.close()
    assert running(daemon, box, pid)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_ping_flood_from_a_client_that_reads_nothing_is_bounded(daemon, box):
    # every ping asks for a pong; a client that reads none must not make
    # the daemon queue them without end
    pid = start(daemon, box, ["sleep", "600"])
    assert_flood_bounded(daemon, box, pid, (b"\x89\xfd" + b"\0" * 4 + b"p" * 125) * 8000)


def test_stdin_flood_to_a_process_that_reads_nothing_is_bounded(daemon, box):
    pid = start(daemon, box, ["sleep", "600"])
    frame = b"\x82\xff" + struct.pack(">Q", 65536) + b"\0" * 4 + b"y" * 65536
    assert_flood_bounded(daemon, box, pid, frame * 16)


def reattach(d, sid, pid):
    """An attach once the slot is free (409 until then)."""
    def once():
        w = attach(d, sid, pid)
        if w.status == 101:
            return w
        assert w.status == 409, (w.status, w.body)
        w.close()
        return None
    return wait_until(once, timeout=TIMEOUT)


@pytest.mark.parametrize("stall", [b"", b"\x82", b"\x82\xfe\x00"])
def test_a_client_stalled_mid_frame_does_not_hold_the_attach(daemon, box, stall):
    # the socket stays open and says nothing more: a crashed host, a
    # half-open connection, or a slowloris in the middle of a frame head
    pid = start(daemon, box, ["sh", "-c", "while read x; do echo got $x; done"])
    stuck = attach(daemon, box, pid)
    assert stuck.status == 101
    stuck.s.sendall(stall)
    w = reattach(daemon, box, pid)
    assert w, "the stalled attach kept the process's slot"
    w.recv()  # attached
    w.send(2, b"back\r")
    w.until(lambda op, p, out: b"got back" in out)
    w.close()
    stuck.close()
    serving(daemon, box)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_a_client_answering_pings_stays_attached(daemon, box):
    pid = start(daemon, box, ["sh", "-c", "while read x; do echo got $x; done"])
    w = attach(daemon, box, pid)
    assert w.status == 101
    pings = 0
    while pings < 4:  # one more than the ticks that end a silent client
        op, p = w.recv()
        assert op != 8, f"closed: {p!r}"
        if op == 9:
            pings += 1
            w.send(10, p)
    w.send(2, b"still\r")
    w.until(lambda op, p, out: b"got still" in out)
    w2 = attach(daemon, box, pid)
    assert w2.status == 409
    w2.close()
    w.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_a_crashed_client_frees_the_slot(daemon, box):
    pid = start(daemon, box, ["sleep", "600"])
    w = attach(daemon, box, pid)
    assert w.status == 101
    w.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    w.close()  # a reset, no close frame
    w2 = reattach(daemon, box, pid)
    assert w2
    w2.close()
    serving(daemon, box)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


# ---- handshakes that must not be upgraded ------------------------------------------------

def raw(d, request):
    """The status line of the daemon's answer to request (bytes), and
    whether the connection then stays open for another request."""
    s = socket.create_connection(("127.0.0.1", d.port), timeout=TIMEOUT)
    s.sendall(request)
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(65536)
        if not c:
            break
        buf += c
    s.close()
    return buf.split(b"\r\n", 1)[0]


def upgrade_headers(d, key="dGhlIHNhbXBsZSBub25jZQ=="):
    return (f"Host: 127.0.0.1:{d.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n")


@pytest.mark.parametrize("path", ["/v1/sandboxes", "/mcp", "/healthz"])
def test_an_upgrade_elsewhere_is_not_taken_over(daemon, box, path):
    status = raw(daemon, f"GET {path} HTTP/1.1\r\n{upgrade_headers(daemon)}\r\n".encode())
    assert b" 101 " not in status, status
    serving(daemon, box)


@pytest.mark.parametrize("key", ["", "short==", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25j!Q==",
                                 "dGhlIHNhbXBsZSBub25jZQ==x"])
def test_a_bad_key_is_400(daemon, box, key):
    pid = start(daemon, box, ["sleep", "600"])
    w = attach(daemon, box, pid, headers={"Sec-WebSocket-Key": key})
    assert w.status == 400 and "Sec-WebSocket-Key" in w.body["error"]["message"], w.body
    w.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


@pytest.mark.parametrize("origin", ["null", "http://evil.example", "http://127.0.0.1.evil.example",
                                    "file://", "http://localhost.evil.example:80"])
def test_a_foreign_origin_is_refused_before_the_upgrade(daemon, box, origin):
    pid = start(daemon, box, ["sleep", "600"])
    w = attach(daemon, box, pid, headers={"Origin": origin})
    assert w.status == 403, (w.status, w.body)
    w.close()
    assert running(daemon, box, pid)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_a_rebound_host_is_refused_without_a_token(daemon, box):
    # a page whose name was rebound to 127.0.0.1: same-origin, so no Origin
    # header, but its own name in Host
    pid = start(daemon, box, ["sleep", "600"])
    w = attach(daemon, box, pid, headers={"Host": f"attacker.example:{daemon.port}"})
    assert w.status == 403, (w.status, w.body)
    w.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_pipelined_bytes_after_the_request_are_frames_not_requests(daemon, box):
    # a second HTTP request behind the upgrade is read as WebSocket data
    # (unmasked garbage: 1002), never answered as HTTP
    pid = start(daemon, box, ["sleep", "600"])
    w = attach(daemon, box, pid, early=b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n")
    assert w.status == 101
    code, _ = w.close_code()
    assert code == 1002
    assert b"HTTP/1.1" not in w.buf
    w.close()
    assert running(daemon, box, pid)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_attach_names_its_own_sandbox_only(daemon, box):
    # another sandbox's process id is not this sandbox's
    r = moat(daemon.url, "create")
    other = r.stdout.decode().strip()
    try:
        pid = start(daemon, other, ["sleep", "600"])
        assert pid not in procs(daemon, box)
        w = attach(daemon, box, pid)
        assert w.status == 404, (w.status, w.body)
        w.close()
    finally:
        moat(daemon.url, "rm", other)


def test_the_sandbox_deleted_while_attached(daemon):
    sid = moat(daemon.url, "create").stdout.decode().strip()
    pid = start(daemon, sid, ["sleep", "600"])
    w = attach(daemon, sid, pid)
    assert w.status == 101
    w.recv()
    api(daemon, "DELETE", f"/v1/sandboxes/{sid}")
    # writes after it are dropped, the connection ends, the daemon serves on
    try:
        w.send(2, b"late\r")
        code, _ = w.close_code()
        assert code in (1000, 1011), code
    except (EOFError, OSError):
        pass
    w.close()
    assert sid not in [b["id"] for b in api(daemon, "GET", "/v1/sandboxes")["sandboxes"]]


# ---- the client against a hostile server ---------------------------------------------------

def test_the_client_against_a_server_flooding_pings_stays_bounded(tmp_path):
    # a server (the user chose its URL) that pings without end and reads
    # nothing: the client's pongs must not pile up without bound
    import base64
    import hashlib
    import subprocess
    import threading
    from test_attach import GUID
    from test_client import MOAT
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    done = threading.Event()
    grew = []

    def serve(c):
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += c.recv(65536)
        key = [ln.split(b":", 1)[1].strip() for ln in buf.split(b"\r\n")
               if ln.lower().startswith(b"sec-websocket-key:")][0]
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        att = json.dumps({"type": "attached", "process_id": 1, "tty": False}).encode()
        c.sendall(bytes([0x81, len(att)]) + att)
        c.settimeout(15)
        sent = 0
        try:
            while sent < FLOOD:
                c.sendall(b"\x89\x00" * 65536)
                sent += 131072
        except OSError:
            pass
        grew.append(rss_mib(proc.pid))
        done.set()
        c.close()

    asan = os.environ.get("ASAN_OPTIONS", "")
    env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
    env.update(MOAT_URL=f"http://127.0.0.1:{port}",
               ASAN_OPTIONS=(asan + ":" if asan else "") + "quarantine_size_mb=0")
    proc = subprocess.Popen([MOAT, "attach", "sbx", "1"], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    c, _ = srv.accept()
    t = threading.Thread(target=serve, args=(c,))
    t.start()
    base = rss_mib(proc.pid)
    assert done.wait(TIMEOUT * 5)
    t.join()
    err = proc.communicate(timeout=TIMEOUT)[1]
    srv.close()
    assert grew[0] - base < GROWTH_MAX_MIB, f"the client grew by {grew[0] - base} MiB"
    assert proc.returncode != 0 and b"AddressSanitizer" not in err, err


def test_daemon_stopped_while_attached_exits_clean():
    # SIGTERM with an attach open (and one stalled mid-frame): the daemon
    # ends (evhttp frees the connections, the door with them), ASan quiet
    d = Daemon()
    try:
        sid = moat(d.url, "create").stdout.decode().strip()
        pid = start(d, sid, ["sleep", "600"])
        w = attach(d, sid, pid)
        assert w.status == 101
        w.recv()
        w.s.sendall(b"\x82\xfe")
        rc = d.proc.poll()
        assert rc is None
        import signal
        import subprocess
        d.proc.send_signal(signal.SIGTERM)
        try:
            rc = d.proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 0, f"moat serve: {rc}\n{d.output()[-3000:]}"
        w.close()
        out = d.output()
        assert "Sanitizer" not in out, out[-4000:]
    finally:
        d.stop()


def test_http10_upgrade_is_not_a_websocket(daemon, box):
    # RFC 6455 4.1: HTTP/1.1 at least; an HTTP/1.0 request must not be
    # taken over half-way (it is answered, or refused, in HTTP)
    pid = start(daemon, box, ["sleep", "600"])
    status = raw(daemon, (f"GET /v1/sandboxes/{box}/processes/{pid}/attach HTTP/1.0\r\n"
                          + upgrade_headers(daemon) + "\r\n").encode())
    assert status.startswith(b"HTTP/1.1 ") or status.startswith(b"HTTP/1.0 "), status
    serving(daemon, box)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")
