"""The attach door (docs/API.md, "Attach"): a WebSocket to a process of a
served sandbox, and the client on top of it (`moat exec -i/-t`, `moat
attach`), against a real `moat serve`.

Protocol tests speak RFC 6455 from a raw socket; client tests drive `moat`
on a pseudo-terminal of their own (its slave is the client's controlling
terminal, as in a shell) and check the outcome through /v1 and through the
terminal itself (its size, its termios after the client is gone).
"""
import base64
import fcntl
import hashlib
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import termios
import time
import urllib.error
import urllib.request

import pytest

from conftest import MOAT, wait_until
from test_client import Daemon, moat

TIMEOUT = 60
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

pytestmark = pytest.mark.skipif(
    not os.access(os.path.join(os.path.dirname(MOAT), "moat-client"), os.X_OK),
    reason="moat-client not found")


@pytest.fixture(scope="module")
def daemon():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def box(daemon):
    r = moat(daemon.url, "create")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    yield sid
    moat(daemon.url, "rm", sid)


def api(d, method, path, body=None, token=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(d.url + path, method=method, data=data,
                                 headers={"Content-Type": "application/json"})
    if token or d.token:
        req.add_header("Authorization", f"Bearer {token or d.token}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def start(d, sid, cmd, tty=True, **kw):
    """A process started for attaching (yield_ms 0: the answer is at once)."""
    body = {"cmd": cmd, "tty": tty, "yield_ms": 0, **kw}
    a = api(d, "POST", f"/v1/sandboxes/{sid}/exec", body)
    assert a["running"], a
    return a["process_id"]


def procs(d, sid):
    return {p["process_id"]: p for p in api(d, "GET", f"/v1/sandboxes/{sid}/processes")["processes"]}


def running(d, sid, pid):
    p = procs(d, sid).get(pid)
    return bool(p and p["running"])


# ---- a raw WebSocket client -------------------------------------------------------

class WS:
    def __init__(self, d, path, token=None, headers=None, early=b""):
        self.s = socket.create_connection(("127.0.0.1", d.port), timeout=TIMEOUT)
        self.key = base64.b64encode(os.urandom(16)).decode()
        h = {"Host": f"127.0.0.1:{d.port}", "Upgrade": "websocket", "Connection": "Upgrade",
             "Sec-WebSocket-Key": self.key, "Sec-WebSocket-Version": "13"}
        tok = token or d.token
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        h.update(headers or {})
        self.s.sendall((f"GET {path} HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in h.items() if v is not None) + "\r\n").encode() + early)
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            assert chunk, f"no answer: {self.buf!r}"
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip()
                        for ln in lines[1:]}
        self.body = None
        if self.status != 101:
            n = int(self.headers.get("content-length", "0"))
            self._need(n)
            self.body = json.loads(self.buf[:n] or b"null")

    def accept_ok(self):
        want = base64.b64encode(hashlib.sha1(self.key.encode() + GUID).digest()).decode()
        return self.headers.get("sec-websocket-accept") == want

    def send(self, op, payload=b"", mask=True, fin=True, length=None):
        n = len(payload) if length is None else length
        b = bytes([(0x80 if fin else 0) | op])
        m = 0x80 if mask else 0
        if n < 126:
            b += bytes([m | n])
        elif n < 65536:
            b += bytes([m | 126]) + struct.pack(">H", n)
        else:
            b += bytes([m | 127]) + struct.pack(">Q", n)
        if mask:
            k = os.urandom(4)
            b += k + bytes(c ^ k[i % 4] for i, c in enumerate(payload))
        else:
            b += payload
        self.s.sendall(b)

    def send_json(self, o):
        self.send(1, json.dumps(o).encode())

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError(f"closed with {self.buf!r}")
            self.buf += chunk

    def recv(self):
        """(opcode, payload) of the next frame; server frames are unmasked."""
        self._need(2)
        op, n = self.buf[0] & 0x0F, self.buf[1] & 0x7F
        assert not self.buf[1] & 0x80, "a server frame was masked"
        off = 2
        if n == 126:
            self._need(4)
            n, off = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10)
            n, off = struct.unpack(">Q", self.buf[2:10])[0], 10
        self._need(off + n)
        p, self.buf = self.buf[off:off + n], self.buf[off + n:]
        return op, p

    def until(self, pred):
        """Frames until pred(op, payload, output so far) holds; returns them."""
        got, out = [], b""
        while True:
            op, p = self.recv()
            got.append((op, p))
            if op == 2:
                out += p
            if pred(op, p, out):
                return got, out

    def expect_output(self, needle):
        """Output frames until needle is in them (or the process exits:
        then the assertion shows what came)."""
        _, out = self.until(lambda op, p, out: needle in out or (op == 1 and b"exit" in p))
        assert needle in out, out

    def close_code(self):
        """The code of the server's close frame, skipping what comes first."""
        while True:
            op, p = self.recv()
            if op == 8:
                return struct.unpack(">H", p[:2])[0] if len(p) >= 2 else None, p[2:]

    def close(self):
        self.s.close()


def attach(d, sid, pid, **kw):
    return WS(d, f"/v1/sandboxes/{sid}/processes/{pid}/attach", **kw)


# ---- protocol ------------------------------------------------------------------------

def test_handshake_io_exit_and_close(daemon, box):
    pid = start(daemon, box, ["sh", "-c", "read x; tty; echo got $x; exit 3"])
    w = attach(daemon, box, pid)
    assert w.status == 101 and w.accept_ok(), (w.status, w.headers)
    op, p = w.recv()
    assert op == 1 and json.loads(p) == {"type": "attached", "process_id": pid, "tty": True}
    w.send(2, b"hello\r")
    got, out = w.until(lambda op, p, out: op == 1 and b'"exit"' in p)
    assert re.search(rb"/dev/pts/\d+", out) and b"got hello" in out, out
    ex = json.loads(got[-1][1])
    assert ex["type"] == "exit" and ex["exit_code"] == 3 and ex["process_id"] == pid
    assert w.close_code()[0] == 1000
    w.send(8, struct.pack(">H", 1000))
    w.close()
    assert pid not in procs(daemon, box) or not running(daemon, box, pid)


def masked(op, payload):
    k = os.urandom(4)
    return bytes([0x80 | op, 0x80 | len(payload)]) + k + bytes(
        c ^ k[i % 4] for i, c in enumerate(payload))


def test_frames_sent_with_the_request_are_not_lost(daemon, box):
    # the request framer in front of evhttp held them back: the door takes them over
    pid = start(daemon, box, ["sh", "-c", "read x; echo early $x"])
    w = attach(daemon, box, pid, early=masked(2, b"bird\r"))
    assert w.status == 101
    w.expect_output(b"early bird")
    w.close()


def test_unmasked_client_frame_is_refused_with_1002(daemon, box):
    pid = start(daemon, box, ["sh", "-c", "read x; echo got $x"])
    w = attach(daemon, box, pid)
    assert w.status == 101
    w.send(2, b"x\n", mask=False)
    code, reason = w.close_code()
    assert code == 1002 and b"masked" in reason, (code, reason)
    w.close()
    # the process was not fed, and still runs (a bad client only loses its attach)
    assert running(daemon, box, pid)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_oversized_frame_is_refused_with_1009(daemon, box):
    pid = start(daemon, box, ["sleep", "60"])
    w = attach(daemon, box, pid)
    assert w.status == 101
    w.send(2, b"", length=2 << 20)  # the head of a 2 MiB frame, its bytes never sent
    assert w.close_code()[0] == 1009
    w.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_ping_pong_and_fragmented_control_message(daemon, box):
    pid = start(daemon, box, ["sh", "-c", "read x; stty size"], cols=80, rows=24)
    w = attach(daemon, box, pid)
    w.recv()  # attached
    w.send(9, b"are you there")
    op, p = w.recv()
    assert (op, p) == (10, b"are you there")
    # a resize in two fragments with a ping between them
    msg = json.dumps({"type": "resize", "cols": 123, "rows": 45}).encode()
    w.send(1, msg[:10], fin=False)
    w.send(9, b"x")
    w.send(0, msg[10:])
    op, p = w.recv()
    assert (op, p) == (10, b"x")
    # wait for the resize to be in place: it went to the agent before the stdin below
    w.send(2, b"go\r")
    w.expect_output(b"45 123")
    w.close()


def test_bad_control_message_is_an_error_message_not_a_close(daemon, box):
    pid = start(daemon, box, ["sh", "-c", "read x; echo fine $x"])
    w = attach(daemon, box, pid)
    w.recv()
    w.send_json({"type": "dance"})
    op, p = w.recv()
    err = json.loads(p)
    assert op == 1 and err["type"] == "error" and "dance" in err["error"]["message"]
    w.send(2, b"still\r")
    _, out = w.until(lambda op, p, out: b"fine still" in out)
    w.close()


def test_unknown_pid_is_404_before_the_upgrade(daemon, box):
    w = attach(daemon, box, 99999)
    assert w.status == 404 and w.body["error"]["code"] == "not_found", (w.status, w.body)
    assert f"no process 99999 in sandbox {box}" in w.body["error"]["message"], w.body
    w.close()


def test_plain_get_is_400_naming_the_upgrade(daemon, box):
    pid = start(daemon, box, ["sleep", "60"])
    w = attach(daemon, box, pid, headers={"Upgrade": None, "Connection": None})
    assert w.status == 400 and "Upgrade: websocket" in w.body["error"]["message"]
    w.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_foreign_origin_is_403(daemon, box):
    pid = start(daemon, box, ["sleep", "60"])
    w = attach(daemon, box, pid, headers={"Origin": "https://evil.example"})
    assert w.status == 403 and w.body["error"]["code"] == "forbidden"
    w.close()
    # the Origin alone made the difference: a loopback page's is upgraded
    w = attach(daemon, box, pid, headers={"Origin": f"http://127.0.0.1:{daemon.port}"})
    assert w.status == 101, (w.status, w.body)
    w.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_one_attach_at_a_time_and_close_detaches(daemon, box):
    pid = start(daemon, box, ["sh", "-c", "while read x; do echo got $x; done"])
    w = attach(daemon, box, pid)
    assert w.status == 101
    w2 = attach(daemon, box, pid)
    assert w2.status == 409 and w2.body["error"]["code"] == "conflict"
    w2.close()
    w.recv()
    w.send(8, struct.pack(">H", 1000) + b"bye")
    assert w.close_code()[0] == 1000
    w.close()
    assert running(daemon, box, pid)
    # re-attach: new output comes to the new one
    w3 = wait_until(lambda: (lambda x: x if x.status == 101 else x.close())(
        attach(daemon, box, pid)), timeout=TIMEOUT)
    assert w3
    w3.recv()
    w3.send(2, b"again\r")
    w3.until(lambda op, p, out: b"got again" in out)
    w3.close()
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def test_bad_token_is_401_before_the_upgrade():
    d = Daemon(token="s3cret-attach")
    try:
        r = moat(d.url, "create", token=d.token)
        assert r.returncode == 0, r.stderr
        sid = r.stdout.decode().strip()
        pid = start(d, sid, ["sleep", "60"])
        w = attach(d, sid, pid, token="wrong")
        assert w.status == 401 and w.body["error"]["code"] == "unauthorized"
        w.close()
        w = attach(d, sid, pid)
        assert w.status == 101
        w.close()
    finally:
        d.stop()


# ---- the client on a terminal ---------------------------------------------------------

class Term:
    """`moat ARGS` with a pty of its own as controlling terminal."""

    def __init__(self, d, *args, cols=100, rows=30):
        self.master, self.slave = pty.openpty()
        self.resize(cols, rows)
        self.before = termios.tcgetattr(self.slave)
        env = {k: v for k, v in os.environ.items() if k != "MOAT_API_TOKEN"}
        env["MOAT_URL"] = d.url
        slave = self.slave

        def pre():
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        self.p = subprocess.Popen([MOAT] + [str(a) for a in args], stdin=slave,
                                  stdout=slave, stderr=slave, preexec_fn=pre, env=env)
        self.out = b""

    def resize(self, cols, rows):
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def read(self, t=0.1):
        if select.select([self.master], [], [], t)[0]:
            try:
                d = os.read(self.master, 65536)
            except OSError:
                d = b""
            self.out += d
            return bool(d)
        return False

    def expect(self, pattern, timeout=TIMEOUT):
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        while not rx.search(self.out):
            if time.monotonic() > end:
                raise AssertionError(f"no {pattern!r} in {self.out!r}")
            if not self.read() and self.p.poll() is not None:
                self.read()
                if not rx.search(self.out):
                    raise AssertionError(f"exited {self.p.returncode} without {pattern!r}: {self.out!r}")
        return rx.search(self.out)

    def send(self, b):
        os.write(self.master, b)

    def wait(self, timeout=TIMEOUT):
        end = time.monotonic() + timeout
        while self.p.poll() is None and time.monotonic() < end:
            self.read()
        rc = self.p.wait(timeout=5)
        while self.read(0.05):
            pass
        return rc

    def termios_now(self):
        return termios.tcgetattr(self.slave)

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def term(daemon):
    made = []

    def mk(*args, **kw):
        t = Term(daemon, *args, **kw)
        made.append(t)
        return t
    yield mk
    for t in made:
        t.close()


def test_exec_it_runs_on_a_pty_of_the_terminals_size(term, box):
    t = term("exec", "-it", box, "--", "sh", "-c", "tty; stty size; exit 7", cols=111, rows=33)
    assert t.wait() == 7, t.out
    assert re.search(rb"/dev/pts/\d+\r\n", t.out) and b"33 111" in t.out, t.out
    # raw mode while it ran, and back as it was afterwards
    assert t.termios_now() == t.before


def test_resize_of_the_terminal_is_seen_inside(term, box):
    t = term("exec", "-it", box, "--", "sh", "-c",
             'trap "stty size; exit 0" WINCH; echo ready; while :; do sleep 0.1; done')
    t.expect(rb"ready")
    t.resize(120, 50)  # the kernel sends SIGWINCH to the client
    assert t.wait() == 0, t.out
    assert b"50 120" in t.out, t.out


def sleep_state(d, sid):
    """The state letter of the sandbox's `sleep 300` (from its /proc), or ''."""
    r = api(d, "POST", f"/v1/sandboxes/{sid}/exec", {"cmd": [
        "sh", "-c", 'for s in /proc/[0-9]*/stat; do read -r l < $s 2>/dev/null || continue; '
        'case "$l" in *"(sleep) "*) set -- $l; echo $3;; esac; done']})
    return r["stdout"].strip()


def test_job_control_in_an_interactive_bash(daemon, term, box):
    t = term("exec", "-it", box, "--", "bash", "--norc", "-i")
    t.expect(rb"[$#] $")
    t.send(b"sleep 300\r")
    # bash gives it the terminal before it execs: then Ctrl-Z is for it
    assert wait_until(lambda: sleep_state(daemon, box) == "S", timeout=TIMEOUT)
    t.send(b"\x1a")  # Ctrl-Z
    t.expect(rb"Stopped\s+sleep 300")
    assert sleep_state(daemon, box) == "T"
    t.send(b"jobs; fg\r")
    t.expect(rb"\r\nsleep 300\r\n")
    # fg continues it once the terminal is its own again
    assert wait_until(lambda: sleep_state(daemon, box) == "S", timeout=TIMEOUT)
    t.send(b"\x03")  # Ctrl-C reaches the foreground job, not the client
    t.expect(rb"[$#] $")
    t.send(b"echo code=$?; exit 5\r")
    assert t.wait() == 5, t.out
    assert b"code=130" in t.out, t.out
    assert b"no job control" not in t.out, t.out


def test_detach_keys_leave_it_running_and_attach_comes_back(daemon, term, box):
    t = term("exec", "-it", box, "--", "sh", "-c", "while read x; do echo got $x; done")
    t.send(b"one\r")
    t.expect(rb"got one")
    t.send(b"\x10\x11")  # Ctrl-P Ctrl-Q
    assert t.wait() == 0, t.out
    m = re.search(rb"moat attach (\S+) (\d+)", t.out)
    assert m and m.group(1).decode() == box, t.out
    pid = int(m.group(2))
    assert t.termios_now() == t.before
    assert running(daemon, box, pid)
    t2 = term("attach", box, pid)
    # attached once its terminal is raw (the server's "attached" says it is a tty)
    assert wait_until(lambda: t2.termios_now() != t2.before, timeout=TIMEOUT)
    t2.send(b"two\r")
    t2.expect(rb"got two")
    # a broken sequence goes through as typed: Ctrl-P then x
    t2.send(b"\x10x\r")
    t2.expect(rb"got \x10x")
    t2.send(b"\x10\x11")
    assert t2.wait() == 0, t2.out
    assert running(daemon, box, pid)
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{pid}")


def procs_first(d, sid):
    return next(iter(procs(d, sid)))


def attach_status(d, sid, pid):
    w = attach(d, sid, pid)
    w.close()
    return w.status


def test_sigterm_to_the_client_restores_the_terminal(daemon, term, box):
    t = term("exec", "-it", box, "--", "sh", "-c", "echo ready; while read x; do echo got $x; done")
    t.expect(rb"ready")
    assert t.termios_now() != t.before  # raw
    # attached: a second attach is refused while the client's is up
    pid = procs_first(daemon, box)
    assert wait_until(lambda: attach_status(daemon, box, pid) == 409, timeout=TIMEOUT)
    t.p.send_signal(signal.SIGTERM)
    assert t.wait() == 128 + signal.SIGTERM, t.out
    assert t.termios_now() == t.before
    m = re.search(rb"moat attach \S+ (\d+)", t.out)
    assert m and running(daemon, box, int(m.group(1))), t.out
    api(daemon, "DELETE", f"/v1/sandboxes/{box}/processes/{int(m.group(1))}")


def test_tty_without_a_terminal_is_an_error(daemon, box):
    r = moat(daemon.url, "exec", "-t", box, "--", "true")
    assert r.returncode == 125 and b"stdin is not a terminal" in r.stderr, r.stderr


def test_interactive_without_tty_pipes_stdin_and_splits_stderr(daemon, box):
    r = moat(daemon.url, "exec", "-i", box, "--", "sh", "-c", "cat; echo oops >&2; exit 4",
             input=b"piped in\n")
    assert r.returncode == 4, r.stderr
    assert r.stdout == b"piped in\n" and b"oops" in r.stderr, (r.stdout, r.stderr)


def test_attach_to_an_unknown_process_names_it(daemon, box):
    r = moat(daemon.url, "attach", box, "4242")
    assert r.returncode == 125 and b"no process 4242" in r.stderr, r.stderr


class SlowUpgrade:
    """A server that takes its time to answer the attach's upgrade, then
    reads one frame, answers exit 0 and closes: what the client sends after
    a resize that came during the handshake."""

    def __init__(self, delay):
        import threading
        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        self.s.listen(1)
        self.url = f"http://127.0.0.1:{self.s.getsockname()[1]}"
        self.delay = delay
        self.got = None
        self.asked = threading.Event()
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()

    def serve(self):
        c, _ = self.s.accept()
        c.settimeout(TIMEOUT)
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(4096)
        key = re.search(rb"Sec-WebSocket-Key: *(\S+)", head, re.I).group(1)
        self.asked.set()
        time.sleep(self.delay)
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        c.sendall(unmasked_text({"type": "attached", "tty": True}))
        buf = b""
        msgs = []
        while not any(m.get("type") == "resize" and m.get("cols") == 120 for m in msgs):
            d = c.recv(4096)
            if not d:
                break
            buf += d
            while len(buf) >= 6:
                n = buf[1] & 0x7F
                if len(buf) < 6 + n:
                    break
                mask, payload = buf[2:6], buf[6:6 + n]
                buf = buf[6 + n:]
                msgs.append(json.loads(bytes(b ^ mask[i % 4] for i, b in enumerate(payload))))
        self.got = msgs
        c.sendall(unmasked_text({"type": "exit", "exit_code": 0}))
        c.sendall(bytes([0x88, 2]) + struct.pack("!H", 1000))
        time.sleep(0.5)
        c.close()


def unmasked_text(o):
    p = json.dumps(o).encode()
    assert len(p) < 126
    return bytes([0x81, len(p)]) + p


def test_resize_during_the_handshake_is_sent_after_it():
    """A SIGWINCH while the upgrade is awaited interrupted the wait, and the
    client gave up with "no answer"; it must wait on and send the new size."""
    srv = SlowUpgrade(delay=1.5)
    t = Term(srv, "attach", "fakebox", "7")
    try:
        assert srv.asked.wait(TIMEOUT)
        time.sleep(0.2)
        t.resize(120, 50)  # the kernel sends SIGWINCH to the client
        assert t.wait() == 0, t.out
        assert b"no answer" not in t.out
        assert any(m.get("type") == "resize" and m.get("cols") == 120 and m.get("rows") == 50
                   for m in srv.got), srv.got
    finally:
        t.close()
