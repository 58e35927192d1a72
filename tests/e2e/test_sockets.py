"""Socket address families (issue 9, finding 1).

A sandbox may make sockets of AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK with
NETLINK_ROUTE only; socketpair(2) of AF_UNIX only. Everything else fails
with EAFNOSUPPORT (or EPERM), in `moat run` and in a `moat serve` sandbox.
The point is the host: vsock has no network namespace, so a vsock port
bound inside would be taken on the host (and CID 2 is the hypervisor).
"""
import errno
import json
import os
import select
import socket
import subprocess
import textwrap

import pytest

from conftest import IS_ROOT, PY, wait_until
from test_serve import AGENT, SERVE, Daemon

AF_MAX = 46  # <bits/socket.h>: AF_MCTP is 45
ALLOWED = {int(f) for f in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)}
# the list, and the rest of the kernel's families by name
NAMED = {
    "AF_UNSPEC": 0, "AF_AX25": 3, "AF_IPX": 4, "AF_APPLETALK": 5, "AF_NETROM": 6,
    "AF_BRIDGE": 7, "AF_ATMPVC": 8, "AF_X25": 9, "AF_ROSE": 11, "AF_DECnet": 12,
    "AF_NETBEUI": 13, "AF_SECURITY": 14, "AF_KEY": 15, "AF_PACKET": 17, "AF_ASH": 18,
    "AF_ECONET": 19, "AF_ATMSVC": 20, "AF_RDS": 21, "AF_SNA": 22, "AF_IRDA": 23,
    "AF_PPPOX": 24, "AF_WANPIPE": 25, "AF_LLC": 26, "AF_IB": 27, "AF_MPLS": 28,
    "AF_CAN": 29, "AF_TIPC": 30, "AF_BLUETOOTH": 31, "AF_IUCV": 32, "AF_RXRPC": 33,
    "AF_ISDN": 34, "AF_PHONET": 35, "AF_IEEE802154": 36, "AF_CAIF": 37, "AF_ALG": 38,
    "AF_NFC": 39, "AF_VSOCK": 40, "AF_KCM": 41, "AF_QIPCRTR": 42, "AF_SMC": 43,
    "AF_XDP": 44, "AF_MCTP": 45,
}

# Runs inside: every refused (family, type, protocol) by raw syscall, so that
# the upper halves of the registers are ours too. Prints one JSON line.
PROBE = textwrap.dedent(r"""
    import ctypes, errno, json, os, socket
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    SYS_socket, SYS_socketpair = 41, 53
    L = ctypes.c_long
    bad, refused = [], 0
    def call(what, nr, *a):
        global refused
        ctypes.set_errno(0)
        sv = (ctypes.c_int * 2)()
        r = libc.syscall(L(nr), *[L(x) for x in a], ctypes.byref(sv))
        e = ctypes.get_errno()
        if r >= 0:
            os.close(r) if nr == SYS_socket else (os.close(sv[0]), os.close(sv[1]))
            bad.append([what, "made a socket"])
        elif e != errno.EAFNOSUPPORT:
            # the filter answers, before any capability check could (EPERM)
            bad.append([what, errno.errorcode.get(e, e)])
        else:
            refused += 1
    FAMS = sorted(set(range(0, {AF_MAX} + 3)) | set({NAMED}.values())
                  | {{0x7fffffff, 0xffffffff, 1 << 16, 255, 256}})
    TYPES = [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_RAW, socket.SOCK_SEQPACKET]
    HI = 0x100000000
    for f in FAMS:
        for t in TYPES:
            if f not in {ALLOWED}:
                call(("socket", f, t), SYS_socket, f, t, 0)
                call(("socket", f, t, "high half set"), SYS_socket, HI | f, t, 0)
                call(("socket", f, t, "cloexec"), SYS_socket, f, t | socket.SOCK_CLOEXEC, 0)
            if f != socket.AF_UNIX:
                call(("socketpair", f, t), SYS_socketpair, f, t, 0)
                call(("socketpair", f, t, "high half set"), SYS_socketpair, HI | f, t, 0)
    # (AF_INET, SOCK_PACKET) is an AF_PACKET socket in the kernel
    for t in (10, 10 | socket.SOCK_CLOEXEC, 10 | socket.SOCK_NONBLOCK):
        for p in (0, 0x300, 0x0008):
            call(("socket", "AF_INET", "SOCK_PACKET", t, p), SYS_socket, socket.AF_INET, t, p)
    # netlink: every protocol but NETLINK_ROUTE (0)
    for p in list(range(1, 33)) + [0xffffffff, 0x10000, HI | 9]:
        for t in (socket.SOCK_RAW, socket.SOCK_DGRAM):
            call(("netlink", t, p), SYS_socket, socket.AF_NETLINK, t, p)
    # x32 (another ABI, the same arch): EPERM from the filter, or ENOSYS
    # from a kernel without x32; either way no socket
    ctypes.set_errno(0)
    r = libc.syscall(L(0x40000000 | SYS_socket), L(socket.AF_VSOCK), L(1), L(0))
    if r >= 0:
        bad.append(["x32 socket(AF_VSOCK)", "made a socket"])
    print(json.dumps({{"bad": bad, "refused": refused}}))
""").format(AF_MAX=AF_MAX, NAMED=NAMED, ALLOWED=ALLOWED)

# Runs inside: the allowed families still work, and what NETLINK_ROUTE is
# kept for (getifaddrs behind if_nameindex).
WORKS = textwrap.dedent(r"""
    import json, socket
    out = {}
    def t(name, fn):
        try:
            fn()
            out[name] = "ok"
        except OSError as e:
            out[name] = repr(e)
    def mk(*a):
        socket.socket(*a).close()
    t("unix stream", lambda: mk(socket.AF_UNIX, socket.SOCK_STREAM))
    t("unix dgram", lambda: mk(socket.AF_UNIX, socket.SOCK_DGRAM))
    t("unix pair", lambda: [s.close() for s in socket.socketpair(socket.AF_UNIX)])
    t("unix pair seqpacket",
      lambda: [s.close() for s in socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)])
    t("inet stream", lambda: mk(socket.AF_INET, socket.SOCK_STREAM))
    t("inet dgram", lambda: mk(socket.AF_INET, socket.SOCK_DGRAM))
    t("inet6 stream", lambda: mk(socket.AF_INET6, socket.SOCK_STREAM))
    t("inet6 dgram", lambda: mk(socket.AF_INET6, socket.SOCK_DGRAM))
    t("netlink route", lambda: mk(socket.AF_NETLINK, socket.SOCK_RAW, 0))
    t("netlink route dgram", lambda: mk(socket.AF_NETLINK, socket.SOCK_DGRAM, 0))
    def gai():
        r = socket.getaddrinfo("localhost", 80, 0, socket.SOCK_STREAM, 0, socket.AI_ADDRCONFIG)
        assert r, r
    t("getaddrinfo AI_ADDRCONFIG", gai)
    def ifn():
        names = [n for _, n in socket.if_nameindex()]
        if "lo" not in names:
            raise OSError(0, "no lo in %r" % names)
    t("if_nameindex", ifn)
    print(json.dumps(out))
""")


def last_json(text):
    for line in reversed((text or "").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in: {text!r}")


def check_probe(j):
    assert j["refused"] > 1000, j      # it really ran through the sweep
    made = [b for b in j["bad"] if b[1] == "made a socket"]
    assert j["bad"] == [], (made[:20], j["bad"][:20])


def check_works(j):
    assert j == {k: "ok" for k in j} and len(j) == 12, j


# ---- the host's vsock -------------------------------------------------------------

def host_vsock():
    """None when the host can make vsock sockets, else why not (a reason
    to skip: then there is nothing a sandbox could take)."""
    def try_make():
        try:
            socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).close()
            return None
        except (OSError, AttributeError) as e:
            return repr(e)
    why = try_make()
    if why and IS_ROOT:
        subprocess.run(["modprobe", "vsock_loopback"], capture_output=True)
        why = try_make()
    return why


def free_vsock_port():
    """A vsock port the host can bind now (then released)."""
    for _ in range(50):
        port = int.from_bytes(os.urandom(2), "big") + 20000
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        try:
            s.bind((socket.VMADDR_CID_ANY, port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    pytest.skip("no free vsock port found on the host")


def host_can_bind(port):
    s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    try:
        s.bind((socket.VMADDR_CID_ANY, port))
        s.listen(1)
        return True
    except OSError as e:
        return repr(e)
    finally:
        s.close()


# Runs inside: try to take vsock port P (bind + listen), then write the
# outcome to `tried` and hold whatever it got until stdin closes (or a
# minute passes), so the host looks while the sandbox still holds it.
HOLD = textwrap.dedent(r"""
    import socket, sys, os, select
    port = int(sys.argv[1])
    try:
        s = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        s.bind((socket.VMADDR_CID_ANY, port))
        s.listen(1)
        res = "BOUND"
    except OSError as e:
        res = "REFUSED %d" % e.errno
    with open("tried.tmp", "w") as f:
        f.write(res)
    os.rename("tried.tmp", "tried")
    print(res, flush=True)
    select.select([sys.stdin], [], [], 60)
""")


@pytest.fixture
def vsock_port():
    why = host_vsock()
    if why:
        pytest.skip(f"the host kernel has no usable vsock ({why})")
    return free_vsock_port()


# ---- moat run ---------------------------------------------------------------------

@pytest.mark.parametrize("net", ["default", "none"])
def test_run_refuses_every_other_family(run, net):
    opts = ["--net", "none"] if net == "none" else []
    r = run.py(PROBE, *opts, timeout=120)
    assert r.returncode == 0, r.stderr
    check_probe(last_json(r.stdout))


# i386 socketcall(SYS_SOCKET, {AF_VSOCK, SOCK_STREAM, 0}) and i386 socket(2)
# by `int 0x80` from this 64-bit process (arguments below 4 GiB).
INT80_SOCKET = textwrap.dedent(r"""
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    page = libc.mmap(None, 4096, 7, 0x22 | 0x40, -1, 0)  # rwx, private anon, MAP_32BIT
    assert page not in (None, ctypes.c_void_p(-1).value) and page < 1 << 32, page
    args = page + 2048
    ctypes.memmove(args, struct.pack("<3I", 40, 1, 0), 12)
    def int80(nr, b, c, d):
        code = (b"\x53" + b"\xb8" + struct.pack("<I", nr) + b"\xbb" + struct.pack("<I", b)
                + b"\xb9" + struct.pack("<I", c) + b"\xba" + struct.pack("<I", d)
                + b"\xcd\x80\x5b\xc3")
        ctypes.memmove(page, code, len(code))
        return ctypes.CFUNCTYPE(ctypes.c_int)(page)()
    print("SOCKETCALL", int80(102, 1, args, 0), flush=True)
    print("SOCKET", int80(359, 40, 1, 0), flush=True)
""")


def test_run_i386_socket_calls_refused(run):
    host = subprocess.run([PY, "-c", INT80_SOCKET], capture_output=True, text=True)
    if host.returncode != 0 or "SOCKET" not in host.stdout:
        pytest.skip(f"no i386 emulation on this kernel: {host.stderr[-200:]!r}")
    r = run.py(INT80_SOCKET)
    assert r.returncode == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    assert got == {"SOCKETCALL": str(-errno.EPERM), "SOCKET": str(-errno.EPERM)}, r.stdout


def test_run_allowed_families_work(run):
    r = run.py(WORKS)
    assert r.returncode == 0, r.stderr
    check_works(last_json(r.stdout))


def test_run_cannot_take_a_host_vsock_port(run, ws, vsock_port):
    (ws / "hold.py").write_text(HOLD)
    p = run.popen(["-w", ws, "--net", "none", "--", PY, "hold.py", str(vsock_port)],
                  stdin=subprocess.PIPE, text=True)
    try:
        line = ""
        rl, _, _ = select.select([p.stdout], [], [], 60)
        if rl:
            line = p.stdout.readline().strip()
        assert line, p.stderr.read() if p.poll() is not None else "no answer from inside"
        # the sandbox still runs (holding whatever it got): the host's turn
        assert p.poll() is None
        assert host_can_bind(vsock_port) is True, line
        assert line.startswith("REFUSED"), line
    finally:
        p.stdin.close()
        p.wait(timeout=30)


# ---- moat serve (the agent's processes get the same filter) -------------------------

@pytest.fixture(scope="module")
def srv():
    if not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)):
        pytest.skip("moat-serve / moat-agent not found next to moat")
    d = Daemon()
    yield d
    d.stop()


@pytest.fixture
def sbx(srv):
    sid = srv.create()["id"]
    yield sid
    try:
        srv.delete(f"/v1/sandboxes/{sid}")
    except OSError:
        pass


def test_serve_refuses_every_other_family(srv, sbx):
    srv.fput(sbx, "probe.py", PROBE)
    j = srv.ex(sbx, ["python3", "probe.py"], timeout_ms=120000)
    assert j["exit_code"] == 0, j
    check_probe(last_json(j["stdout"]))


def test_serve_allowed_families_work(srv, sbx):
    srv.fput(sbx, "works.py", WORKS)
    j = srv.ex(sbx, ["python3", "works.py"])
    assert j["exit_code"] == 0, j
    check_works(last_json(j["stdout"]))


def test_serve_cannot_take_a_host_vsock_port(srv, sbx, vsock_port):
    srv.fput(sbx, "hold.py", HOLD)
    j = srv.ex(sbx, ["python3", "hold.py", str(vsock_port)], yield_ms=0)
    pid = j.get("process_id")
    assert pid, j
    tried = srv.ws(sbx) / "tried"
    try:
        assert wait_until(tried.exists, timeout=60), "the sandbox never tried"
        line = tried.read_text()
        # the process still runs (it holds what it got until stdin closes)
        s = srv.stdin(sbx, pid, yield_ms=0).json()
        assert s.get("running") is True, s
        assert host_can_bind(vsock_port) is True, line
        assert line.startswith("REFUSED"), line
    finally:
        srv.stdin(sbx, pid, close=True, yield_ms=5000)
