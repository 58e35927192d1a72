"""End-to-end tests of the agent's wire protocol additions (issue 10):
rename, resize, watch / watch_wait / unwatch, mkdir exist_ok/parents,
write metadata, the richer entries, exec stdin "null" and tag, the "user"
field.

The daemon's HTTP API does not expose these ops yet, so each test starts a
sandbox through /v1 (test_serve.Daemon) and then speaks frames
(src/proto/frame.h: u32 LE json_len, u32 LE data_len, JSON, data) to the
sandbox's agent directly on <data>/sandboxes/<id>/ctl.sock, next to the
daemon's own connection. Security tests assert the host is unchanged.
"""
import base64
import itertools
import json
import os
import socket
import stat
import struct
import time

import pytest

from conftest import uid_tag, wait_until
from test_serve import AGENT, SERVE, Daemon, quiet_delete

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not found next to $MOAT_BIN")

ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"]


class Agent:
    """One connection to a sandbox's agent. call() sends a request and
    returns (reply, data) of that id; replies to other ids are kept."""

    _ids = itertools.count(1_000_000)

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(30)
        self.s.connect(str(path))
        self.buf = b""
        self.kept = {}

    def close(self):
        self.s.close()

    def send(self, op, data=b"", **fields):
        i = next(self._ids)
        js = json.dumps(dict(fields, id=i, op=op)).encode()
        self.s.sendall(struct.pack("<II", len(js), len(data)) + js + data)
        return i

    def _frame(self, timeout):
        self.s.settimeout(timeout)
        while True:
            if len(self.buf) >= 8:
                jl, dl = struct.unpack("<II", self.buf[:8])
                if len(self.buf) >= 8 + jl + dl:
                    js = json.loads(self.buf[8:8 + jl])
                    data = self.buf[8 + jl:8 + jl + dl]
                    self.buf = self.buf[8 + jl + dl:]
                    return js, data
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("agent closed the connection")
            self.buf += chunk

    def reply(self, i, timeout=30):
        end = time.monotonic() + timeout
        while i not in self.kept:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to {i}")
            js, data = self._frame(left)
            self.kept[js.get("id")] = (js, data)
        return self.kept.pop(i)

    def pending(self, wait=0.3):
        """Replies that arrive within `wait` seconds (ids)."""
        try:
            while True:
                js, data = self._frame(wait)
                self.kept[js.get("id")] = (js, data)
        except (socket.timeout, TimeoutError):
            pass
        return set(self.kept)

    def call(self, op, data=b"", timeout=30, **fields):
        js, d = self.reply(self.send(op, data, **fields), timeout)
        return js, d

    def ok(self, op, data=b"", **fields):
        js, d = self.call(op, data, **fields)
        assert "error" not in js, (op, fields, js)
        return js, d

    def err(self, op, code, data=b"", **fields):
        js, _ = self.call(op, data, **fields)
        assert "error" in js, (op, fields, js)
        assert js["error"]["code"] == code, (op, fields, js)
        return js["error"]["message"]

    def run(self, script, timeout_ms=20000, **fields):
        js, d = self.ok("exec", argv=["/bin/sh", "-c", script], env=ENV, cwd="/workspace",
                        wait={"timeout_ms": timeout_ms}, **fields)
        out = d[:js["stdout_len"]]
        err = d[js["stdout_len"]:js["stdout_len"] + js["stderr_len"]]
        return js, out.decode(errors="replace"), err.decode(errors="replace")

    def sh(self, script):
        js, out, err = self.run(script)
        assert js.get("exit_code") == 0, (script, js, out, err)
        return out


@pytest.fixture(scope="module")
def srv():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def sb(srv, request):
    b = srv.create(metadata={"test": request.node.name[:60]})
    sid = b["id"]
    a = Agent(srv.sbdir(sid) / "ctl.sock")
    a.sid = sid
    a.ws = srv.ws(sid)
    yield a
    a.close()
    quiet_delete(srv, sid)


def host_ws(a, rel=""):
    return os.path.join(str(a.ws), rel)


# ---- exec: stdin null, tag, ps ----------------------------------------------------

def test_stdin_null_ends_cat_at_once(sb):
    t0 = time.monotonic()
    js, out, err = sb.run("cat; echo end", timeout_ms=10000, stdin="null", close_stdin=False)
    assert js["exit_code"] == 0 and out == "end\n" and not js["timed_out"], (js, out, err)
    assert time.monotonic() - t0 < 5
    # without it (stdin kept open) cat waits: the wait yields, still running
    js, out, _ = sb.run("cat; echo end", timeout_ms=500, close_stdin=False)
    assert js["running"] is True and out == "", (js, out)
    sb.ok("signal", process_id=js["process_id"], signal="KILL", forget=True)


def test_stdin_null_bad_value(sb):
    sb.err("exec", "invalid_request", argv=["/bin/true"], env=ENV, cwd="/workspace",
           stdin="file")


def test_tag_cwd_env_in_ps(sb):
    tag = f"tag-{uid_tag()}"
    env = ENV + [f"MARK={tag}"]
    js, _ = sb.ok("exec", argv=["/bin/sleep", "30"], env=env, cwd="/tmp", tag=tag)
    pid = js["process_id"]
    ps, _ = sb.ok("ps")
    mine = [p for p in ps["processes"] if p["process_id"] == pid]
    assert len(mine) == 1, ps
    p = mine[0]
    assert p["tag"] == tag and p["cwd"] == "/tmp" and p["env"] == env, p
    assert p["cmd"] == ["/bin/sleep", "30"] and p["running"] is True, p
    sb.ok("signal", process_id=pid, signal="KILL", forget=True)
    sb.err("exec", "invalid_request", argv=["/bin/true"], env=ENV, cwd="/", tag=5)


# ---- resize -----------------------------------------------------------------------

def test_resize_tty_sigwinch(sb):
    script = ("trap 'stty size; exit 0' WINCH; stty size; echo ready; "
              "i=0; while [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; echo late")
    js, _ = sb.ok("exec", argv=["/bin/sh", "-c", script], env=ENV, cwd="/workspace",
                  tty=True, cols=80, rows=24)
    pid = js["process_id"]
    out = b""
    end = time.monotonic() + 15
    while b"ready" not in out and time.monotonic() < end:
        js, d = sb.ok("wait", process_id=pid, until="output", timeout_ms=2000)
        out += d
    assert b"24 80" in out and b"ready" in out, out
    sb.ok("resize", process_id=pid, cols=100, rows=30)
    while time.monotonic() < end:
        js, d = sb.ok("wait", process_id=pid, timeout_ms=5000)
        out += d
        if not js["running"]:
            break
    assert js["running"] is False and js["exit_code"] == 0, (js, out)
    assert b"30 100" in out and b"late" not in out, out


def test_resize_errors(sb):
    sb.err("resize", "not_found", process_id=987654, cols=10, rows=10)
    js, _ = sb.ok("exec", argv=["/bin/sleep", "30"], env=ENV, cwd="/")
    sb.err("resize", "conflict", process_id=js["process_id"], cols=10, rows=10)
    sb.ok("signal", process_id=js["process_id"], forget=True)
    js, _ = sb.ok("exec", argv=["/bin/sleep", "30"], env=ENV, cwd="/", tty=True)
    sb.err("resize", "invalid_request", process_id=js["process_id"], cols=0, rows=10)
    sb.ok("signal", process_id=js["process_id"], forget=True)


# ---- the user field ----------------------------------------------------------------

def test_user_field(sb):
    sb.ok("stat", path="/workspace", user="user")
    msg = sb.err("stat", "forbidden", path="/workspace", user="root")
    assert "no root user" in msg
    sb.err("exec", "forbidden", argv=["/bin/true"], env=ENV, cwd="/", user="root")
    sb.err("write", "invalid_request", b"x", path="u.txt", user="admin")
    assert not os.path.lexists(host_ws(sb, "u.txt"))
    js, out, _ = sb.run("echo hi", user="user")
    assert out == "hi\n"


# ---- rename ------------------------------------------------------------------------

def test_rename(sb):
    sb.ok("write", b"one", path="a.txt")
    js, _ = sb.ok("rename", src="a.txt", dst="/workspace/b.txt")
    e = js["entry"]
    assert e["path"] == "/workspace/b.txt" and e["name"] == "b.txt" and e["type"] == "file"
    assert e["size"] == 3
    assert not os.path.lexists(host_ws(sb, "a.txt"))
    with open(host_ws(sb, "b.txt"), "rb") as f:
        assert f.read() == b"one"
    # rename(2) semantics: the destination is replaced
    sb.ok("write", b"two", path="c.txt")
    sb.ok("rename", src="c.txt", dst="b.txt")
    with open(host_ws(sb, "b.txt"), "rb") as f:
        assert f.read() == b"two"
    # directories move with their contents
    sb.sh("mkdir -p d/e && echo x > d/e/f")
    js, _ = sb.ok("rename", src="d", dst="d2")
    assert js["entry"]["type"] == "dir"
    assert os.path.isfile(host_ws(sb, "d2/e/f")) and not os.path.lexists(host_ws(sb, "d"))
    sb.err("rename", "not_found", src="missing", dst="x")
    sb.err("rename", "conflict", src="b.txt", dst="d2")  # a file over a directory
    sb.sh("mkdir -p full && touch full/x")
    sb.err("rename", "conflict", src="d2", dst="full")  # onto a non-empty directory
    sb.err("rename", "invalid_path", src="/", dst="x")
    sb.err("rename", "invalid_path", src="/workspace", dst="/tmp/ws")


def test_rename_protected_names_refused(sb):
    sb.ok("write", b"evil", path="payload")
    before = {n: os.lstat(host_ws(sb, n)) for n in (".bashrc", ".git")
              if os.path.lexists(host_ws(sb, n))}
    for dst in (".bashrc", ".gitconfig", ".git/hooks/pre-commit", ".git/config",
                ".vscode/settings.json", ".claude/settings.json"):
        js, _ = sb.call("rename", src="payload", dst=dst)
        assert js.get("error", {}).get("code") in ("forbidden", "not_found"), (dst, js)
        if js["error"]["code"] == "not_found":  # a missing protected parent
            assert dst.count("/") >= 1, (dst, js)
    for src in (".bashrc", ".git", ".vscode", ".git/hooks"):
        js, _ = sb.call("rename", src=src, dst="moved")
        assert js.get("error", {}).get("code") in ("forbidden", "not_found"), (src, js)
    # a protected directory cannot be moved away to make room either
    sb.err("rename", "forbidden", src=".git", dst="dotgit")
    assert os.path.isfile(host_ws(sb, "payload"))
    with open(host_ws(sb, "payload"), "rb") as f:
        assert f.read() == b"evil"
    assert not os.path.lexists(host_ws(sb, "moved"))
    assert not os.path.lexists(host_ws(sb, "dotgit"))
    for n, st in before.items():
        now = os.lstat(host_ws(sb, n))
        assert (now.st_ino, now.st_mode, now.st_size) == (st.st_ino, st.st_mode, st.st_size), n
    # what the sandbox sees is unchanged too
    assert sb.sh("cat .bashrc 2>/dev/null; echo .") == ".\n"


def test_rename_kernel_filesystems_refused(sb):
    sb.ok("write", b"x", path="f")
    for src, dst in (("/proc/self/exe", "exe"), ("/proc/1/root", "r"), ("/sys/kernel", "k"),
                     ("/dev/null", "n"), ("f", "/proc/self/x"), ("f", "/dev/x"),
                     ("f", "/sys/x")):
        sb.err("rename", "invalid_path", src=src, dst=dst)
    # through a symlink into /proc
    sb.sh("ln -s /proc/self p")
    sb.err("rename", "invalid_path", src="p/exe", dst="exe")
    sb.err("rename", "invalid_path", src="f", dst="p/cwd/x")
    for n in ("exe", "r", "k", "n"):
        assert not os.path.lexists(host_ws(sb, n))
    assert os.path.isfile(host_ws(sb, "f"))


# ---- mkdir ---------------------------------------------------------------------------

def test_mkdir(sb):
    js, _ = sb.ok("mkdir", path="m1")
    assert js["created"] is True and js["entry"]["type"] == "dir", js
    assert js["entry"]["path"] == "/workspace/m1"
    assert os.path.isdir(host_ws(sb, "m1"))
    js, _ = sb.ok("mkdir", path="m1")
    assert js["created"] is False and js["entry"]["type"] == "dir", js
    sb.err("mkdir", "already_exists", path="m1", exist_ok=False)
    js, _ = sb.ok("mkdir", path="m2/a/b")
    assert js["created"] is True and os.path.isdir(host_ws(sb, "m2/a/b"))
    sb.err("mkdir", "not_found", path="m3/a/b", parents=False)
    assert not os.path.lexists(host_ws(sb, "m3"))
    js, _ = sb.ok("mkdir", path="m4", parents=False, exist_ok=False)
    assert js["created"] is True
    sb.ok("write", b"x", path="file")
    msg = sb.err("mkdir", "invalid_path", path="file", exist_ok=True)
    assert "file" in msg
    sb.err("mkdir", "conflict", path="file")  # /v1's answer, unchanged
    sb.err("mkdir", "invalid_path", path="/proc/x")


# ---- write metadata, entries ---------------------------------------------------------

def test_write_metadata_and_stat(sb):
    meta = {"owner": "alice", "k.2-x_y": "v" * 1000, "empty": "", "u": "\u00e9t\u00e9"}
    js, _ = sb.ok("write", b"hello", path="m/f.txt", metadata=meta)
    e = js["entry"]
    assert e["path"] == "/workspace/m/f.txt" and e["size"] == 5, e
    assert e["metadata"] == meta, e
    js, _ = sb.ok("stat", path="m/f.txt", metadata=True)
    assert js["entry"]["metadata"] == meta
    js, _ = sb.ok("stat", path="m/f.txt")
    assert "metadata" not in js["entry"]
    js, _ = sb.ok("list", path="m", metadata=True)
    assert js["entries"][0]["metadata"] == meta
    assert os.getxattr(host_ws(sb, "m/f.txt"), "user.moat.owner") == b"alice"
    # bad metadata: refused before anything is written
    for bad in ({"bad key": "v"}, {"": "v"}, {"k" * 65: "v"}, {"k": "v" * 4097},
                {"k": 5}, ["k"]):
        sb.err("write", "invalid_request", b"x", path="bad.txt", metadata=bad)
    assert not os.path.lexists(host_ws(sb, "bad.txt"))
    # a 4 KiB value is allowed; ext4 keeps all of a file's xattrs in one
    # block, so it may not fit there: then nothing is written either
    js, _ = sb.call("write", b"x", path="big.txt", metadata={"k": "v" * 4096})
    if "error" in js:
        assert js["error"]["code"] == "too_large", js
        assert not os.path.lexists(host_ws(sb, "big.txt"))
        assert not [n for n in os.listdir(host_ws(sb)) if "moat-" in n]
    else:
        assert js["entry"]["metadata"] == {"k": "v" * 4096}


def test_write_metadata_on_tmpfs_workspace(srv):
    """limits.disk makes the workspace a tmpfs (user xattrs since 6.6)."""
    r = srv.post("/v1/sandboxes", {"limits": {"disk": "8M"}})
    assert r.status == 201, r
    sid = r.json()["id"]
    srv.agent_pid(sid)
    a = Agent(srv.sbdir(sid) / "ctl.sock")
    try:
        meta = {"k": "v" * 4096, "n": "1"}
        js, _ = a.call("write", b"t", path="t.txt", metadata=meta)
        if "error" in js:  # an older kernel's tmpfs: refused, nothing written
            assert js["error"]["code"] == "invalid_request", js
            assert "extended attributes" in js["error"]["message"], js
            a.err("stat", "not_found", path="t.txt")
            names = [e["name"] for e in a.ok("list", path=".")[0]["entries"]]
            assert not [n for n in names if "moat-" in n or n == "t.txt"], names
        else:
            assert js["entry"]["metadata"] == meta, js
            assert a.ok("stat", path="t.txt", metadata=True)[0]["entry"]["metadata"] == meta
    finally:
        a.close()
        quiet_delete(srv, sid)


def test_entry_fields(sb):
    sb.sh("echo hi > f; ln -s f lnk; mkdir d")
    js, _ = sb.ok("stat", path="f")
    e = js["entry"]
    for k in ("name", "path", "type", "size", "mode", "mtime", "mtime_ns", "uid", "gid",
              "owner", "group"):
        assert k in e, (k, e)
    assert 0 <= e["mtime_ns"] < 10**9
    host = os.lstat(host_ws(sb, "f"))
    assert e["mtime"] == int(host.st_mtime) and e["mtime_ns"] == host.st_mtime_ns % 10**9
    # owner and group as the sandbox names them (its /etc/passwd, /etc/group)
    names = sb.sh("stat -c '%u %g %U %G' f").split()
    assert [str(e["uid"]), str(e["gid"])] == names[:2], (e, names)
    want_owner = names[0] if names[2] == "UNKNOWN" else names[2]
    want_group = names[1] if names[3] == "UNKNOWN" else names[3]
    assert (e["owner"], e["group"]) == (want_owner, want_group), (e, names)
    js, _ = sb.ok("stat", path="lnk")
    assert js["entry"]["type"] == "symlink" and js["entry"]["symlink_target"] == "f"
    assert js["entry"]["target"] == "f"
    js, _ = sb.ok("list", path=".")
    by = {x["name"]: x for x in js["entries"]}
    assert by["lnk"]["symlink_target"] == "f" and "symlink_target" not in by["f"]
    assert by["d"]["owner"] == want_owner


def test_owner_names_from_sandbox_files(sb):
    """A root filesystem's own names: the default view shows the host's
    /etc, so check that a uid with no name falls back to the number."""
    js, _ = sb.ok("stat", path="/")
    e = js["entry"]
    assert isinstance(e["owner"], str) and e["owner"], e
    if e["uid"] == 0:
        assert e["owner"] == "root"


def test_list_non_utf8_name(sb):
    sb.sh("printf x > \"$(printf 'caf\\351')\"")
    js, _ = sb.ok("list", path=".")
    bad = [x for x in js["entries"] if "name_raw_b64" in x]
    assert len(bad) == 1, js
    assert bad[0]["name"] == "caf\ufffd"
    assert base64.b64decode(bad[0]["name_raw_b64"]) == b"caf\xe9"


def test_big_listing_is_cut_not_refused(sb):
    """Entries are bigger now (owner, group, ...): a listing that would not
    fit one 1 MiB frame is cut and says so, instead of failing."""
    js, out, err = sb.run("mkdir big && cd big && /usr/bin/python3 -c 'import os\n"
                          "for i in range(4000): os.mknod(\"f%04d-%s\" % (i, \"x\" * 100))'",
                          timeout_ms=120000)
    assert js["exit_code"] == 0, (js, out, err)
    js, _ = sb.ok("list", path="big")
    assert js["truncated"] is True and 1000 < len(js["entries"]) < 4000, len(js["entries"])


# ---- watch ------------------------------------------------------------------------------

def events_until(a, wid, pred, timeout=10):
    got = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        js, _ = a.ok("watch_wait", watch_id=wid, timeout_ms=500)
        got += js["events"]
        if pred(got) or js.get("ended"):
            if js.get("ended"):
                got.append({"ended": True})
            break
    return got


def subseq(want, got):
    it = iter(got)
    return all(any(w == g for g in it) for w in want)


def test_watch_events_in_order(sb):
    sb.sh("mkdir w")
    js, _ = sb.ok("watch", path="w")
    wid = js["watch_id"]
    sb.sh("cd w && : > f && echo hi >> f && chmod 600 f && mv f g && rm g")
    want = [("f", "create"), ("f", "write"), ("f", "chmod"), ("f", "rename"),
            ("g", "create"), ("g", "remove")]
    got = events_until(sb, wid, lambda g: ("g", "remove") in
                       [(e.get("name"), e.get("type")) for e in g])
    pairs = [(e.get("name"), e.get("type")) for e in got]
    assert subseq(want, pairs), pairs
    sb.ok("unwatch", watch_id=wid)
    sb.err("watch_wait", "not_found", watch_id=wid, timeout_ms=10)
    sb.err("unwatch", "not_found", watch_id=wid)


def test_watch_api_write_shows_no_temp_file(sb):
    sb.sh("mkdir w")
    wid = sb.ok("watch", path="w")[0]["watch_id"]
    sb.ok("write", b"data", path="w/api.txt")
    got = events_until(sb, wid, lambda g: any(e.get("name") == "api.txt" for e in g))
    assert [e["name"] for e in got] and all(e["name"] == "api.txt" for e in got), got
    assert ("api.txt", "create") in [(e["name"], e["type"]) for e in got], got


def test_watch_include_entry(sb):
    sb.sh("mkdir w")
    wid = sb.ok("watch", path="/workspace/w", include_entry=True)[0]["watch_id"]
    sb.sh("echo abc > w/f")
    got = events_until(sb, wid, lambda g: any(e.get("entry") for e in g))
    ents = [e["entry"] for e in got if e.get("entry")]
    assert ents and ents[0]["path"] == "/workspace/w/f" and ents[0]["type"] == "file", got


def test_watch_recursive_with_later_dirs(sb):
    sb.sh("mkdir -p r/old")
    wid = sb.ok("watch", path="r", recursive=True)[0]["watch_id"]
    sb.sh("echo 1 > r/old/a")
    got = events_until(sb, wid, lambda g: any(e.get("name") == "old/a" for e in g))
    assert ("old/a", "create") in [(e.get("name"), e.get("type")) for e in got], got
    sb.sh("mkdir r/new")
    got = events_until(sb, wid, lambda g: any(e.get("name") == "new" for e in g))
    assert ("new", "create") in [(e.get("name"), e.get("type")) for e in got], got
    sb.sh("echo 2 > r/new/b")
    got = events_until(sb, wid, lambda g: any(e.get("name") == "new/b" for e in g))
    assert ("new/b", "create") in [(e.get("name"), e.get("type")) for e in got], got
    # a tree made at once: what landed before its watch is told too
    sb.sh("mkdir -p r/deep/x/y && echo 3 > r/deep/x/y/c")
    got = events_until(sb, wid, lambda g: any(e.get("name") == "deep/x/y/c" for e in g))
    assert "deep/x/y/c" in [e.get("name") for e in got], got
    # not recursive: nothing from below
    wid2 = sb.ok("watch", path="r")[0]["watch_id"]
    sb.sh("echo 4 > r/new/c; echo 5 > r/top")
    got = events_until(sb, wid2, lambda g: any(e.get("name") == "top" for e in g))
    names = [e.get("name") for e in got]
    assert "top" in names and "new/c" not in names, got


def test_watch_queue_bounded_with_overflow(sb):
    sb.sh("mkdir w && touch w/f w/g")
    wid = sb.ok("watch", path="w")[0]["watch_id"]
    # two names in turn: inotify merges an event with an identical last one
    sb.sh("/usr/bin/python3 -c 'import os\n"
          "for i in range(12000): os.chmod(\"w/\" + \"fg\"[i % 2], 0o644)'")
    got = []
    while True:
        js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=1000)
        assert len(js["events"]) <= 1000
        if not js["events"]:
            break
        got += js["events"]
    assert len(got) == 10001, len(got)
    assert got[-1] == {"type": "overflow"} and all(e["type"] == "chmod" for e in got[:-1])
    # after the queue was taken, events are queued again
    sb.sh("chmod 644 w/f")
    js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=3000)
    assert js["events"] == [{"name": "f", "type": "chmod"}], js


def test_watch_errors_and_limits(sb):
    sb.err("watch", "not_found", path="missing")
    sb.ok("write", b"x", path="afile")
    sb.err("watch", "invalid_path", path="afile")
    sb.err("watch", "invalid_path", path="/proc")
    sb.err("watch", "invalid_path", path="/proc/self/cwd")
    sb.err("watch", "forbidden", path="/", user="root")
    sb.err("watch_wait", "not_found", watch_id=424242, timeout_ms=0, poll=True)
    ids = [sb.ok("watch", path=".")[0]["watch_id"] for _ in range(64)]
    sb.err("watch", "limit_reached", path=".")
    for i in ids:
        sb.ok("unwatch", watch_id=i)
    wid = sb.ok("watch", path=".")[0]["watch_id"]
    sb.ok("unwatch", watch_id=wid)


def test_watch_wait_timeouts_poll_replace_cancel(sb):
    sb.sh("mkdir w")
    wid = sb.ok("watch", path="w")[0]["watch_id"]
    t0 = time.monotonic()
    js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=0, poll=True)
    assert js["events"] == [] and time.monotonic() - t0 < 2
    t0 = time.monotonic()
    js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=300)
    dt = time.monotonic() - t0
    assert js["events"] == [] and 0.25 <= dt < 5, (js, dt)
    # a pending wait is answered when an event comes
    i = sb.send("watch_wait", watch_id=wid, timeout_ms=0)
    time.sleep(0.2)
    sb.sh(": > w/x")
    js, _ = sb.reply(i, timeout=10)
    assert ("x", "create") in [(e["name"], e["type"]) for e in js["events"]], js
    # drain: the rest of x's events (close_write...) may reach the agent
    # after the first answer; two empty polls in a row (the agent has read
    # its inotify queue in between) rather than one after a guessed 0.2 s
    empty = 0
    for _ in range(200):
        js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=0, poll=True)
        empty = empty + 1 if js["events"] == [] else 0
        if empty == 2:
            break
    assert empty == 2, js
    # a second wait answers the first at once, empty
    i1 = sb.send("watch_wait", watch_id=wid, timeout_ms=0)
    time.sleep(0.2)
    i2 = sb.send("watch_wait", watch_id=wid, timeout_ms=0)
    js, _ = sb.reply(i1, timeout=5)
    assert js["events"] == [], js
    # cancel drops the pending one: never answered
    sb.ok("cancel", call=i2)
    sb.sh("touch w/y")
    assert i2 not in sb.pending(0.5)
    js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=2000)
    assert "y" in [e["name"] for e in js["events"]], js


def test_watch_dir_removed_ends(sb):
    sb.sh("mkdir -p gone/sub")
    wid = sb.ok("watch", path="gone", recursive=True)[0]["watch_id"]
    sb.sh("rm -r gone")
    got = events_until(sb, wid, lambda g: False)
    assert got and got[-1] == {"ended": True}, got
    assert ("sub", "remove") in [(e.get("name"), e.get("type")) for e in got], got
    js, _ = sb.ok("watch_wait", watch_id=wid, timeout_ms=0, poll=True)
    assert js.get("ended") is True and js["events"] == []
    sb.ok("unwatch", watch_id=wid)


def test_watch_dropped_with_its_connection(srv, sb):
    sb.sh("mkdir w")
    other = Agent(srv.sbdir(sb.sid) / "ctl.sock")
    ids = [other.ok("watch", path="w")[0]["watch_id"] for _ in range(64)]
    other.send("watch_wait", watch_id=ids[0], timeout_ms=0)
    other.close()
    # its 64 watches went with it: there is room again
    wid = wait_until(lambda: sb.call("watch", path="w")[0].get("watch_id"), timeout=5)
    assert wid, "watches of a closed connection were kept"
    sb.ok("unwatch", watch_id=wid)
    js, _ = sb.ok("ping")
    assert js["ok"] is True


def test_watch_inotify_quota_is_limit_reached(srv):
    r = srv.post("/v1/sandboxes", {"limits": {"quotas": {"inotify_watches": 16}}})
    if r.status != 201:
        pytest.skip(f"quotas not available here: {r}")
    sid = r.json()["id"]
    srv.agent_pid(sid)
    a = Agent(srv.sbdir(sid) / "ctl.sock")
    try:
        a.sh("mkdir -p q && cd q && for i in $(seq 1 40); do mkdir d$i; done")
        js, _ = a.call("watch", path="q", recursive=True)
        assert js.get("error", {}).get("code") == "limit_reached", js
        # nothing is left half-watched: a small watch still works
        js, _ = a.ok("watch", path="q/d1")
        a.ok("unwatch", watch_id=js["watch_id"])
    finally:
        a.close()
        quiet_delete(srv, sid)
