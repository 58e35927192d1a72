"""Magic links in the files API, and archives holding protected names
(issue 9: finding 5 and the archive point), against a real `moat serve`.

A magic link (/proc/<pid>/{exe,cwd,root,fd/N,map_files/*}, /proc/self,
/proc/thread-self) is followed by the kernel to the object itself, outside
the agent's mount view: a link to /proc/self/exe made in the sandbox used
to make GET .../files serve the host's moat-agent binary. Every API path is
now resolved by the agent without them (src/agent/resolve.c). Each
operation is tried through each kind of link: refused as invalid_path, and
the host side is checked: the bytes served are not the agent's, the host's
agent binary is unchanged, nothing was written anywhere.

An archive PUT (or a manifest) with a protected name (.git/hooks/x,
.bashrc, .vscode/settings.json, ...) used to answer 204 and drop it
silently: now the whole archive is refused (403 naming the entry) and the
workspace is byte for byte what it was.

The daemon helpers come from test_serve.py.
"""
import base64
import hashlib
import os
import uuid

import pytest

from conftest import diff_snap, snapshot, uid_tag
from test_serve import AGENT, SERVE, Daemon, assert_error, host_names, q, tar_bytes, tar_members

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason=f"moat-serve / moat-agent not found next to {AGENT}")

# name in /workspace -> link target (made inside the sandbox with ln -s)
LINKS = {
    "exe": "/proc/self/exe",
    "exe1": "/proc/1/exe",
    "texe": "/proc/thread-self/exe",
    "self": "/proc/self",
    "tself": "/proc/thread-self",
    "root1": "/proc/1/root",
    "sroot": "/proc/self/root",
    "cwd": "/proc/self/cwd",
    "cwdup": "/proc/self/cwd/..",
    "fds": "/proc/self/fd",
    "fdctl": "/proc/self/fd/3",     # the agent's control socket
    "fdroot": "/proc/self/fd/5",    # another of its descriptors
    "fd0": "/proc/self/fd/0",
    "mapf": "/proc/self/map_files/400000-401000",  # the static agent's first page
    "rel": "../proc/self/exe",
    "chain": "chain2",              # chain -> chain2 -> nd/hop -> ../exe -> magic
    "chain2": "nd/hop",
    "nd/hop": "../exe",
    "viadir": "nd/../self",         # through a normal directory into /proc
    "ns": "/proc/self/ns/net",      # namespace links are magic too
    "devfd": "/dev/fd/3",           # /dev/fd -> /proc/self/fd
    "stdin": "/dev/stdin",
    "loop1": "loop2",               # a loop: ELOOP, also invalid_path
    "loop2": "loop1",
}
# paths that name (through a link) a file of the agent or of the sandbox
FILE_PATHS = ["exe", "exe1", "texe", "fdctl", "fdroot", "fd0", "mapf", "rel", "chain",
              "chain2", "nd/hop", "self/exe", "tself/exe", "viadir/exe", "self/environ",
              "self/maps", "self/status", "self/root/etc/hostname", "root1/workspace/keep.txt",
              "sroot/workspace/keep.txt", "cwd/workspace/keep.txt", "cwdup/workspace/keep.txt",
              "fds/3", "fds/5/workspace/keep.txt", "fdroot/workspace/keep.txt",
              "self/fd/5/workspace/keep.txt", "self/cwd/workspace/keep.txt",
              "self/root/proc/self/exe", "root1/proc/1/exe", "ns", "devfd", "stdin", "loop1",
              "self/ns/net"]
# paths that name (through a link) a directory
DIR_PATHS = ["self", "tself", "root1", "sroot", "cwd", "cwdup", "fds", "fdroot", "viadir",
             "self/root", "self/cwd", "self/fd", "self/map_files", "root1/workspace",
             "cwd/tmp", "fdroot/workspace", "sroot/tmp"]
KEEP = b"KEEP-" + uuid.uuid4().hex.encode()


@pytest.fixture(scope="module")
def srv():
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture(scope="module")
def linked(srv):
    """One sandbox with every link of LINKS, and /workspace/keep.txt."""
    b = srv.create(metadata={"test": "magic"})
    sid = b["id"]
    srv.fput(sid, "keep.txt", KEEP)
    script = "mkdir nd && " + " && ".join(f"ln -s '{t}' {n}" for n, t in LINKS.items())
    srv.sh(sid, script)
    yield sid
    try:
        srv.delete(f"/v1/sandboxes/{sid}")
    except OSError:
        pass


def through(paths):
    """The paths that go through a link (stat, PUT and DELETE take the
    last component itself: a link there is described, replaced, removed)."""
    return [p for p in paths if "/" in p and p.split("/")[0] in LINKS]


def agent_bytes():
    with open(AGENT, "rb") as f:
        return f.read()


def agent_id():
    st = os.stat(AGENT)
    return (hashlib.sha256(agent_bytes()).hexdigest(), st.st_size, st.st_mtime_ns, st.st_ino)


def not_agent(body, what):
    a = agent_bytes()
    assert a[:4096] not in body and b"\x7fELF" not in body, what
    assert base64.b64encode(a[:3000]) not in body, what


def refused(r, path, what):
    e = assert_error(r, 400, "invalid_path")
    assert path.split("/")[0] in e["message"], (what, r)
    not_agent(r.body, what)


def sandbox_state(srv, sid):
    """What the sandbox sees in its own writable places (a write through
    a link into its own root would land here)."""
    return srv.sh(sid, "ls -la --time-style=+%s.%N /tmp /workspace /workspace/nd; "
                       "cat /workspace/keep.txt")


def test_magic_link_reads_refused(srv, linked):
    before = agent_id()
    for p in FILE_PATHS:
        refused(srv.fget(linked, p), p, ("GET files", p))
        refused(srv.image(linked, p), p, ("GET image", p))
        r = srv.patch(linked, f"*** Begin Patch\n*** Update File: {p}\n@@\n-x\n+y\n*** End Patch")
        refused(r, p, ("patch update", p))
    for p in through(FILE_PATHS + DIR_PATHS):
        refused(srv.fstat(linked, p), p, ("stat", p))
    for p in DIR_PATHS:
        for depth in (1, 3):
            refused(srv.flist(linked, p, depth=depth), p, ("list", p, depth))
    assert agent_id() == before


def test_magic_link_writes_refused(srv, linked):
    before = agent_id()
    tag = uid_tag()
    state = sandbox_state(srv, linked)
    for p in DIR_PATHS:
        for leaf in (f"pwned-{tag}", f"tmp/pwned-{tag}", f"workspace/pwned-{tag}"):
            t = f"{p}/{leaf}"
            refused(srv.fput(linked, t, b"pwned", expect=None), p, ("PUT", t))
            refused(srv.fmkdir(linked, t), p, ("mkdir", t))
            refused(srv.patch(linked, f"*** Begin Patch\n*** Add File: {t}\n+x\n*** End Patch"),
                    p, ("patch add", t))
            r = srv.patch(linked, "*** Begin Patch\n*** Update File: keep.txt\n"
                                  f"*** Move to: {t}\n@@\n-{KEEP.decode()}\n+moved\n*** End Patch")
            refused(r, p, ("patch move", t))
        for t in (f"{p}/workspace/keep.txt", f"{p}/exe", f"{p}/keep.txt"):
            refused(srv.fdel(linked, t), p, ("DELETE", t))
            refused(srv.fdel(linked, t, recursive=True), p, ("DELETE -r", t))
            refused(srv.patch(linked, f"*** Begin Patch\n*** Delete File: {t}\n*** End Patch"),
                    p, ("patch delete", t))
    for p in through(FILE_PATHS):
        refused(srv.fput(linked, p, b"pwned", expect=None), p, ("PUT", p))
    # nothing landed anywhere: the host's agent, the host, the sandbox itself
    assert agent_id() == before
    assert host_names(srv.base, f"pwned-{tag}") == []
    assert not os.path.lexists(f"/tmp/pwned-{tag}") and not os.path.lexists(f"/pwned-{tag}")
    assert sandbox_state(srv, linked) == state
    assert srv.fread(linked, "keep.txt") == KEEP


def test_magic_link_exec_cwd_refused(srv, linked):
    for p in DIR_PATHS:
        r = srv.post(f"/v1/sandboxes/{linked}/exec", {"cmd": "pwd; cat keep.txt", "cwd": p})
        e = assert_error(r, 400, "invalid_path")
        assert "cwd" in e["message"], (p, r)
    # an ordinary directory still works
    assert srv.sh(linked, "pwd", cwd="nd").strip() == "/workspace/nd"


def test_magic_links_themselves(srv, linked):
    """The links are the sandbox's own files: stat and list describe them
    (what the sandbox wrote, never where they lead on the host), the
    archive keeps them as links, and a PUT or DELETE of the link replaces
    or removes the link itself, never its target."""
    before = agent_id()
    host_agent = os.path.realpath(AGENT)
    for n, t in LINKS.items():
        st = srv.fstat(linked, n)
        assert st.status == 200, st
        j = st.json()
        assert j["type"] == "symlink" and j.get("target") == t, j
    r = srv.flist(linked, "/workspace", depth=2)
    assert r.status == 200, r
    assert host_agent not in r.text and AGENT not in r.text
    r = srv.get(f"/v1/sandboxes/{linked}/archive")
    assert r.status == 200, r
    not_agent(r.body, "archive")
    m = tar_members(r.body)
    for n, t in LINKS.items():
        assert m[n][0].issym() and m[n][0].linkname == t, n
    sid = srv.create(metadata={"test": "magic-replace"})["id"]
    try:
        srv.sh(sid, "ln -s /proc/self/exe exe; ln -s /proc/self/fd/3 ctl; ln -s /proc/1/root r")
        srv.fput(sid, "exe", b"mine")       # replaces the link
        assert srv.fread(sid, "exe") == b"mine"
        assert srv.fstat(sid, "exe").json()["type"] == "file"
        assert srv.fdel(sid, "ctl").status == 204
        assert srv.fdel(sid, "r").status == 204
        assert srv.sh(sid, "ls").split() == ["exe"]
        # a hard link is the same file, not a link to follow
        srv.sh(sid, "ln exe hard")
        assert srv.fread(sid, "hard") == b"mine"
        assert srv.fstat(sid, "hard").json()["type"] == "file"
    finally:
        srv.delete(f"/v1/sandboxes/{sid}")
    assert agent_id() == before


# ---- archives and manifests holding protected names ---------------------------

PROTECTED = [".git/hooks/pre-commit", ".git/config", ".bashrc", ".vscode/settings.json",
             ".claude/settings.json", ".idea/workspace.xml", ".mcp.json", ".zshrc",
             ".git/HEAD"]


@pytest.fixture
def box(srv, request):
    b = srv.create(metadata={"test": request.node.name[:60]})
    yield b["id"]
    try:
        srv.delete(f"/v1/sandboxes/{b['id']}")
    except OSError:
        pass


@pytest.mark.parametrize("name", PROTECTED)
def test_archive_with_protected_name_refused(srv, box, name):
    srv.fput(box, "keep.txt", KEEP)
    srv.fput(box, "sub/old.txt", b"old")
    before = snapshot(srv.ws(box))
    tar = tar_bytes([("a.txt", "file", b"new"), (name, "file", b"#!/bin/sh\necho pwned\n"),
                     ("z/z.txt", "file", b"z")])
    r = srv.put(f"/v1/sandboxes/{box}/archive", tar,
                headers={"Content-Type": "application/x-tar"})
    e = assert_error(r, 403, "forbidden")
    assert name in e["message"], r
    # nothing applied: not the other entries, not the removal of the old ones
    assert diff_snap(before, snapshot(srv.ws(box))) == ""
    assert srv.fread(box, "keep.txt") == KEEP
    assert srv.fread(box, "sub/old.txt") == b"old"
    assert_error(srv.fget(box, "a.txt"), 404)
    assert b"pwned" not in srv.get(f"/v1/sandboxes/{box}/archive").body
    # the same archive without it goes through
    ok = tar_bytes([("a.txt", "file", b"new"), ("z/z.txt", "file", b"z")])
    r = srv.put(f"/v1/sandboxes/{box}/archive", ok, headers={"Content-Type": "application/x-tar"})
    assert r.status == 204, r
    assert srv.fread(box, "a.txt") == b"new"
    assert_error(srv.fget(box, "keep.txt"), 404)


def manifest_for(path, content):
    parts = path.split("/")
    node = {"type": "file", "content": content}
    for p in reversed(parts[1:]):
        node = {"type": "dir", "children": {p: node}}
    return {parts[0]: node}


@pytest.mark.parametrize("name", [".git/hooks/pre-commit", ".bashrc", ".vscode/settings.json"])
def test_manifest_with_protected_name_refused(srv, name):
    before = set(srv.ids())
    entries = {"a.txt": {"type": "file", "content": "a"}, **manifest_for(name, "echo pwned\n")}
    r = srv.post("/v1/sandboxes", {"manifest": {"entries": entries}})
    e = assert_error(r, 403, "forbidden")
    # named: the file, or its directory entry (the manifest has both)
    assert "manifest: " + name.split("/")[0] in e["message"], r
    assert set(srv.ids()) == before
    assert host_names(srv.data / "sandboxes", "a.txt") == []


def test_magic_link_swapped_in_during_requests(srv, box):
    """A sandbox process swaps a directory and a link to /proc/self at the
    same name while the API reads through it: every answer is the
    directory's file or an error, never the agent's bytes."""
    before = agent_id()
    # d and x trade places atomically (renameat2 RENAME_EXCHANGE), over and over
    srv.sh(box, "mkdir x && echo plain > x/exe && ln -s /proc/self d")
    swap = ("import ctypes\n"
            "c = ctypes.CDLL(None, use_errno=True)\n"
            "while True:\n"
            "    assert c.renameat2(-100, b'x', -100, b'd', 2) == 0, ctypes.get_errno()\n")
    srv.fput(box, "swap.py", swap.encode())
    loop = "exec python3 swap.py"
    r = srv.post(f"/v1/sandboxes/{box}/exec", {"cmd": loop, "yield_ms": 1})
    assert r.status == 200 and r.json().get("running"), r
    pid = r.json()["process_id"]
    try:
        for i in range(300):
            r = srv.fget(box, "d/exe")
            not_agent(r.body, ("GET", i))
            assert r.status in (200, 400, 404), r
            if r.status == 200:
                assert r.body in (b"plain\n", b"mine"), r
            r = srv.flist(box, "d")
            assert r.status in (200, 400, 404), r
            assert "environ" not in r.text, r
            r = srv.fput(box, "d/exe", b"mine", expect=None)
            assert r.status in (204, 400, 404), r
        assert agent_id() == before
        # the swapper still runs (it did not die on a failed exchange)
        r = srv.stdin(box, pid, yield_ms=1)
        assert r.status == 200 and r.json().get("running"), r
    finally:
        srv.delete(f"/v1/sandboxes/{box}/processes/{pid}")
    assert agent_id() == before
