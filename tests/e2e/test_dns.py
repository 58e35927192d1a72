"""A denied network that explains itself (issue 12, item 2).

A sandbox with its own network has a resolver on 127.0.0.1:53 inside that
moat serves from the host side: every query gets NXDOMAIN at once, nothing
is forwarded, and the names tried are reported: on `moat run`'s stderr,
with the option that would let them through, and in a served sandbox's
net log as proto "dns" records. Checked through what the sandboxed
program sees (the resolver's answer), moat's stderr and the daemon's
/v1 API; the no-forward test watches a DNS server on the host side."""
import json
import os
import socket
import struct
import subprocess
import textwrap

import pytest

from conftest import IS_ROOT, MOAT, PY, moat_env, uid_tag, wait_until
from test_serve import Daemon

# a lookup inside, and what getaddrinfo said
LOOKUP = textwrap.dedent("""
    import socket, sys
    for n in sys.argv[1:]:
        try:
            socket.getaddrinfo(n, 443)
            print(n, "resolved")
        except socket.gaierror as e:
            print(n, "gaierror", e.errno)
""")


def lookup(run, *names, opts=()):
    return run([*opts, "--", PY, "-c", LOOKUP, *names])


def test_lookup_fails_at_once_and_is_named_with_the_advice(run):
    r = lookup(run, "registry.npmjs.org")
    assert r.returncode == 0, r.stderr
    # EAI_NONAME (a definite answer), not EAI_AGAIN (-3: "try again")
    assert r.stdout.split() == ["registry.npmjs.org", "gaierror", str(socket.EAI_NONAME)]
    assert ("moat: network: off; lookups refused: registry.npmjs.org "
            "(allow with --allow-domain registry.npmjs.org)") in r.stderr, r.stderr


def test_getent_fails_and_resolv_conf_names_the_resolver(run):
    r = run.sh("cat /etc/resolv.conf; getent hosts example.com; echo rc=$?")
    assert "nameserver 127.0.0.1" in r.stdout
    assert "rc=2" in r.stdout, r.stdout  # getent: not found
    assert "lookups refused: example.com (allow with --allow-domain example.com)" in r.stderr


def test_many_names_give_a_bounded_list(run):
    names = [f"n{i}.example" for i in range(100)]
    r = lookup(run, *names, *names)  # each twice: listed once
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stderr.splitlines() if "lookups refused" in l]
    assert len(lines) == 1, r.stderr
    line = lines[0]
    for n in names[:8]:
        assert line.count(n + ",") + line.count(n + " ") >= 1, line
    assert "n8.example" not in line and "n99.example" not in line
    assert "and 92 more" in line, line
    assert "--allow-domain NAME" in line
    assert len(line) < 1000


# a raw query for a name given as labels of bytes
def query(labels, qid=0x1234, qtype=1):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for lab in labels:
        q += bytes([len(lab)]) + lab
    return q + b"\0" + struct.pack(">HH", qtype, 1)


SEND = textwrap.dedent("""
    import socket, sys, struct
    q = bytes.fromhex(sys.argv[1])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(20)
    s.sendto(q, ("127.0.0.1", 53))
    print("udp", s.recv(4096).hex())
    t = socket.create_connection(("127.0.0.1", 53), timeout=20)
    t.sendall(struct.pack(">H", len(q)) + q)
    n = struct.unpack(">H", t.recv(2))[0]
    a = b""
    while len(a) < n:
        a += t.recv(n - len(a))
    print("tcp", a.hex())
    bad = q[:12] + b"\\x05ab"   # a question cut short: FORMERR
    s.sendto(bad, ("127.0.0.1", 53))
    print("bad", s.recv(4096).hex())
""")


def test_answers_echo_id_and_question_over_udp_and_tcp(run):
    q = query([b"Example", b"COM"], qid=0xbeef)
    r = run(["--", PY, "-c", SEND, q.hex()])
    assert r.returncode == 0, r.stderr
    out = dict(l.split() for l in r.stdout.splitlines())
    for proto in ("udp", "tcp"):
        a = bytes.fromhex(out[proto])
        qid, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", a[:12])
        assert qid == 0xbeef
        assert flags & 0x8000 and flags & 0x0100  # a response; RD echoed
        assert flags & 0xf == 3                   # NXDOMAIN
        assert (qd, an, ns, ar) == (1, 0, 0, 0)   # no records, nothing to cache
        assert a[12:] == q[12:]
    bad = bytes.fromhex(out["bad"])
    assert bad[:2] == q[:2] and bad[3] & 0xf == 1 and bad[4:12] == bytes(8)
    assert "lookups refused: example.com" in r.stderr  # lower case


def test_a_hostile_name_is_printed_sanitized(run):
    evil = [b"\x1b[31mred\x1b]0;title\x07", b"line\nbreak", b"x" * 63, b"y" * 63, b"z" * 63]
    r = run(["--", PY, "-c", SEND, query(evil).hex()], raw=True)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    line = [l for l in err.split(b"\n") if b"lookups refused" in l]
    assert len(line) == 1, err
    assert b"\x1b" not in err and b"\x07" not in err
    assert b"\\027\\09131mred\\027\\0930\\059title\\007" in line[0]
    assert b"line\\010break" in line[0]
    assert b"..." in line[0] and b"z" * 10 not in line[0]  # cut short
    # no option is suggested for a name that cannot be one
    assert b"--allow-domain NAME" in line[0]


def test_npm_gives_up_without_retrying(run):
    r = run.sh("echo $npm_config_fetch_retries")
    assert r.stdout.strip() == "0"
    r = run.sh("echo $npm_config_fetch_retries", "--env", "npm_config_fetch_retries=2")
    assert r.stdout.strip() == "2"


@pytest.mark.skipif(not IS_ROOT, reason="a network namespace of the test's own, for its DNS server")
def test_the_resolver_never_forwards(base, ws):
    """moat runs in a network namespace whose loopback has a DNS server on
    127.0.0.1:53 that answers 192.0.2.7 and writes down every query. The
    sandbox gets NXDOMAIN, and the server never hears of the name."""
    seen = base / "seen"
    server = base / "dns.py"
    server.write_text(textwrap.dedent(f"""
        import socket, struct, sys
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 53))
        print("up", flush=True)
        while True:
            d, a = s.recvfrom(4096)
            open({str(seen)!r}, "ab").write(d + b"\\n")
            i = 12
            while d[i]:
                i += 1 + d[i]
            ans = (d[:2] + b"\\x81\\x80\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x00" + d[12:i + 5]
                   + b"\\xc0\\x0c\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x3c\\x00\\x04\\xc0\\x00\\x02\\x07")
            s.sendto(ans, a)
    """))
    resolv = base / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    script = textwrap.dedent(f"""
        set -e
        ip link set lo up
        mount --bind {resolv} /etc/resolv.conf
        {PY} {server} > {base}/up &
        for i in $(seq 200); do [ -s {base}/up ] && break; sleep 0.05; done
        getent hosts canary.example >/dev/null && echo host-side-server-works
        rm -f {seen}
        {MOAT} run -w {ws} -- {PY} -c '{LOOKUP}' secret-{uid_tag()}.example
        kill $!
    """)
    r = subprocess.run(["unshare", "-nm", "sh", "-c", script], capture_output=True,
                       text=True, timeout=60, env=moat_env())
    assert "host-side-server-works" in r.stdout, (r.stdout, r.stderr)
    assert f"gaierror {socket.EAI_NONAME}" in r.stdout, (r.stdout, r.stderr)
    assert "lookups refused: secret-" in r.stderr
    assert not seen.exists(), seen.read_bytes()


def test_with_the_gateway_direct_lookups_fail_and_say_why(run):
    r = lookup(run, "example.org", "nope.example", opts=("--allow-domain", "example.org"))
    assert r.returncode == 0, r.stderr
    assert f"example.org gaierror {socket.EAI_NONAME}" in r.stdout
    assert ("direct lookup of example.org refused (it is allowed through the gateway: "
            "use the proxy, HTTPS_PROXY inside)") in r.stderr, r.stderr
    assert ("direct lookup of nope.example refused (not allowed; allow with "
            "--allow-domain nope.example") in r.stderr, r.stderr


PROXY_GET = textwrap.dedent("""
    import socket
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(b"GET http://localhost:8080/ HTTP/1.1\\r\\nHost: localhost:8080\\r\\n\\r\\n")
    print(s.recv(4096).split(b"\\r\\n")[0].decode())
""")


def test_a_gateway_refusal_of_a_special_address_suggests_a_pin(run):
    r = run.py(PROXY_GET, "--allow-domain", "localhost")
    assert r.returncode == 0, r.stderr
    assert " 403 " in r.stdout
    # localhost resolves (outside) to loopback, refused unless pinned or allowed
    assert "moat: network: refused localhost:8080 (" in r.stderr, r.stderr
    assert "pin it with --resolve localhost:8080:" in r.stderr, r.stderr


def test_a_gateway_refusal_of_a_name_suggests_allowing_it(run):
    r = run.py(PROXY_GET.replace("localhost", "other.example"), "--allow-domain", "example.org")
    assert r.returncode == 0, r.stderr
    assert ("refused other.example:8080 (no allow rule matches; allow with "
            "--allow-domain other.example)") in r.stderr, r.stderr


# ---- moat serve ------------------------------------------------------------------

@pytest.fixture(scope="module")
def srv():
    d = Daemon("--net-allow", "example.org")
    yield d
    d.stop()


def dns_records(srv, sid, name):
    r = srv.get(f"/v1/sandboxes/{sid}/netlog")
    assert r.status == 200
    recs = [json.loads(l) for l in r.text.splitlines() if l.strip()]
    return [x for x in recs if x.get("proto") == "dns" and x.get("host") == name]


@pytest.mark.parametrize("network", [None, {"allow": ["example.org"]}])
def test_serve_netlog_has_the_refused_lookups(srv, network):
    spec = {"metadata": {"test": "dns"}}
    if network:
        spec["network"] = network
    sid = srv.create(**spec)["id"]
    try:
        name = f"n{uid_tag()}.example"
        out = srv.sh(sid, f"{PY} -c '{LOOKUP}' {name} {name}")
        assert f"{name} gaierror {socket.EAI_NONAME}" in out
        assert wait_until(lambda: dns_records(srv, sid, name), timeout=20)
        recs = dns_records(srv, sid, name)
        assert len(recs) == 1, recs  # once per name
        rec = recs[0]
        assert rec["decision"] == "deny" and rec["port"] == 53 and rec["sandbox"] == sid
        assert rec["address"] is None
        assert ("proxy" in rec["reason"]) if network else ("network.allow" in rec["reason"])
    finally:
        srv.delete(f"/v1/sandboxes/{sid}")
