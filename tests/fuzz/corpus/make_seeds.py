#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz (small valid inputs of each kind).
Run from the repository root: python3 tests/fuzz/corpus/make_seeds.py.
The files are committed; this says how they were made."""
import gzip, io, json, os, struct, tarfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)))


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def frame(obj, data=b""):
    js = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack("<II", len(js), len(data)) + js + data


def entry(t, path, data=b"", mode=0o644, mtime=0):
    p = path.encode()
    return struct.pack("<c3xIqIQ", t.encode(), mode, mtime, len(p), len(data)) + p + data


# frames: raw streams (first byte even) and records (odd)
put("fuzz_frame", "request", b"\0" + frame({"id": 1, "op": "exec", "argv": ["/bin/sh", "-c", "true"]}, b"in"))
put("fuzz_frame", "replies", b"\0" + frame({"id": 2, "running": False, "exit_code": 0, "stdout_len": 3,
                                            "stderr_len": 0}, b"hi\n") + frame({"id": 3, "ok": True}))
put("fuzz_frame", "records", b"\1" + b'{"id":4,"op":"write","path":"/workspace/a"}\x1fdata\x1e{"id":5,"op":"ping"}')
put("fuzz_frame", "badlen", b"\2" + b'{"id":1}\x1e{"id":2}')

# entry streams
put("fuzz_entries", "tree", b"\0" + entry("d", "a", mode=0o755) + entry("f", "a/b.txt", b"hello\n")
    + entry("l", "a/c", b"b.txt", mode=0o777))
put("fuzz_entries", "records", b"\1" + b"f\xa4\x01a.txt\x1fcontent\x1ed\xed\x01dir\x1el\xff\x01dir/l\x1fa.txt")
put("fuzz_entries", "bad", b"\0" + entry("f", "../x", b"no"))

# apply_patch: old content NUL patch
put("fuzz_patch", "update", b"\0line1\nline2\nline3\n\0*** Begin Patch\n*** Update File: f.txt\n@@\n line1\n-line2\n+LINE2\n line3\n*** End Patch\n")
put("fuzz_patch", "add_delete", b"\0\0*** Begin Patch\n*** Add File: new.txt\n+hello\n+world\n*** Delete File: old.txt\n*** End Patch\n")
put("fuzz_patch", "move_eof", b"\0a\nb\n\0*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@ a\n-b\n+c\n*** End of File\n*** End Patch\n")
put("fuzz_patch", "wrapped", b"\1x = 1\r\ny = 2\r\n\0@@\n-x = 1\n+x = 3\n y = 2")
# unified diffs (udiff.c): old content NUL diff; and (first byte bit 1) old NUL new
put("fuzz_patch", "udiff_git", b"\0one\r\ntwo\r\nthree\0diff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n one\r\n-two\r\n+TWO\r\n three\n\\ No newline at end of file\n")
put("fuzz_patch", "udiff_files", b"\0bye\n\0diff --git a/n b/n\nnew file mode 100755\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\ndiff --git a/o b/o\ndeleted file mode 100644\n--- a/o\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\ndiff --git a/p b/q\nsimilarity index 100%\nrename from p\nrename to q\ndiff --git a/m b/m\nold mode 100644\nnew mode 100755\n")
put("fuzz_patch", "udiff_plain", b"\0a\nb\nc\n\0--- a.orig\t2026-01-01\n+++ a\t2026-01-02\n@@ -2 +2,2 @@\n-b\n+B\n+B2\n")
put("fuzz_patch", "roundtrip", b"\x06a\nb\nc\nd\r\ne\0a\nB\nc\nd\r\ne\nf")


def tar(members, fmt=tarfile.PAX_FORMAT, comp=None):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for ti, data in members:
            t.addfile(ti, io.BytesIO(data) if data is not None else None)
    raw = b.getvalue()
    return gzip.compress(raw, mtime=0) if comp == "gz" else raw


def ti(name, typ=tarfile.REGTYPE, size=0, mode=0o644, link=""):
    i = tarfile.TarInfo(name)
    i.type, i.size, i.mode, i.linkname, i.mtime = typ, size, mode, link, 1700000000
    return i


files = [(ti("src", tarfile.DIRTYPE, mode=0o755), None), (ti("src/a.c", size=6), b"int a;"),
         (ti("src/l", tarfile.SYMTYPE, link="a.c"), None)]
put("fuzz_archive", "pax.tar", tar(files))
put("fuzz_archive", "ustar.tar.gz", tar(files, tarfile.USTAR_FORMAT, "gz"))
put("fuzz_archive", "gnu_long.tar", tar([(ti("d/" + "n" * 120, size=1), b"x")], tarfile.GNU_FORMAT))
put("fuzz_archive", "escape.tar", tar([(ti("../x", size=1), b"x")]))

# images: tiny valid headers of each format
png = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 3, 2, 8, 6, 0, 0, 0) + b"\0" * 4
put("fuzz_image", "a.png", png)
put("fuzz_image", "a.gif", b"GIF89a" + struct.pack("<HH", 5, 7) + b"\0\0\0;")
jpg = b"\xff\xd8\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\1\1\0\0\1\0\1\0\0" + b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, 9, 10, 1) + b"\1\x11\0"
put("fuzz_image", "a.jpg", jpg)
vp8x = b"VP8X" + struct.pack("<I", 10) + b"\0\0\0\0" + (99).to_bytes(3, "little") + (49).to_bytes(3, "little")
put("fuzz_image", "a.webp", b"RIFF" + struct.pack("<I", 4 + len(vp8x)) + b"WEBP" + vp8x)
vp8l = b"VP8L" + struct.pack("<I", 5) + b"\x2f" + struct.pack("<I", (9 - 1) | ((4 - 1) << 14))
put("fuzz_image", "l.webp", b"RIFF" + struct.pack("<I", 4 + len(vp8l)) + b"WEBP" + vp8l)

# policy files (byte 0: bit 0 srt, bit 1 a second document after a NUL, bit 2 build env)
native = {"mode": "workspace-write", "filesystem": {"allow_read": ["~/.cache"], "deny_read": ["./secret"],
          "allow_write": ["/tmp/x"]}, "network": {"mode": "none", "allow": ["*.example.com"]},
          "env": ["TERM", "A=b"], "limits": {"memory": "512M", "pids": 64, "cpus": 1.5, "timeout": 10}}
put("fuzz_policy_file", "native.json", b"\4" + json.dumps(native).encode())
srt = {"network": {"allowedDomains": ["github.com", "*.npmjs.org"], "deniedDomains": ["evil.test"]},
       "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": [".", "/tmp"], "denyWrite": [".env"]}}
put("fuzz_policy_file", "srt.json", b"\1" + json.dumps(srt).encode())
put("fuzz_policy_file", "both.json", b"\6" + json.dumps(native).encode() + b"\0" + json.dumps(srt).encode())

# manifests
m1 = {"root": "/workspace", "environment": {"A": "1"}, "entries": {
    "README.md": {"type": "file", "content": "# hi\n", "mode": 420},
    "src": {"type": "dir", "children": {"main.py": {"type": "file", "content": "print(1)\n"}}}}}
put("fuzz_manifest", "files.json", json.dumps(m1))
put("fuzz_manifest", "git.json", json.dumps({"entries": {"repo": {"type": "git_repo", "repo": "https://example.invalid/x.git", "ref": "main"}}}))
put("fuzz_manifest", "local.json", json.dumps({"entries": {"data": {"type": "local_dir", "src": "/etc"},
                                                           "f": {"type": "local_file", "src": "/etc/hostname"}}}))

# the API: byte 0 = method (0 GET 1 POST 2 PUT 3 DELETE 4 HEAD 5 PATCH 6 OPTIONS)
# | 8 SSE | 16 create fails | 32 at the limit | 64 net ceiling; target "\n"
# body, then agent replies "\x1e" JSON "\x1f" data
GET, POST, PUT, DELETE = 0, 1, 2, 3


def api(name, method, target, body=b"", replies=(), flags=0):
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    out = bytes([method | flags]) + target.encode() + b"\n" + body
    for r in replies:
        js, data = (r if isinstance(r, tuple) else (r, b""))
        out += b"\x1e" + json.dumps(js).encode() + (b"\x1f" + data if data else b"")
    put("fuzz_api", name, out)


api("create", POST, "/v1/sandboxes", {"env": {"A": "1"}, "metadata": {"k": "v"}, "timeout_s": 60,
    "idle_timeout_s": 30, "limits": {"memory": "512M", "pids": 64, "cpus": 1.5, "disk": "1G"},
    "manifest": {"environment": {"B": "2"}, "entries": {"a.txt": {"type": "file", "content": "x"}}}},
    [{"ok": True}])
api("create_net", POST, "/v1/sandboxes", {"network": {"allow": ["api.example.com"], "deny": ["x.example.com"],
    "resolve": ["api.example.com:10.1.2.3"], "secrets": [{"env": "TOKEN", "hosts": ["api.example.com"]}]}},
    flags=64)
api("exec", POST, "/v1/sandboxes/b/exec", {"cmd": "echo hi", "timeout_ms": 1000, "env": {"X": "y"}, "cwd": "src"},
    [({"process_id": 3, "running": False, "exit_code": 0, "stdout_len": 3, "stderr_len": 1}, b"hi\n!")])
api("exec_yield", POST, "/v1/sandboxes/b/exec", {"cmd": ["sh", "-c", "cat"], "yield_ms": 10, "tty": True,
    "cols": 80, "rows": 24, "stdin": "in", "max_output_bytes": 100},
    [{"process_id": 4}, ({"process_id": 4, "running": True, "stdout_len": 1, "stderr_len": 0}, b"o")])
api("exec_sse", POST | 8, "/v1/sandboxes/b/exec", {"cmd": "ls"},
    [({"process_id": 5, "running": True, "stdout_len": 2, "stderr_len": 0}, b"a\n"),
     ({"process_id": 5, "running": False, "exit_code": 1, "signal": 0, "duration_ms": 3, "timed_out": False,
       "stdout_len": 0, "stderr_len": 2}, b"e\n")])
api("stdin", POST, "/v1/sandboxes/b/processes/4/stdin", {"data": "more\n", "yield_ms": 5, "close": True},
    [{"ok": True}, ({"process_id": 4, "running": False, "exit_code": 0, "stdout_len": 5, "stderr_len": 0}, b"more\n")])
api("signal", DELETE, "/v1/sandboxes/b/processes/4?signal=TERM", replies=[{"ok": True}])
api("ps", GET, "/v1/sandboxes/b/processes", replies=[{"processes": [{"process_id": 4, "running": True}]}])
api("read", GET, "/v1/sandboxes/b/files?path=a.txt", replies=[({"ok": True}, b"content")])
api("write", PUT, "/v1/sandboxes/b/files?path=dir%2Fa.txt", b"data", [{"ok": True}])
api("delete", DELETE, "/v1/sandboxes/b/files?path=dir&recursive=true", replies=[{"ok": True}])
api("mkdir", POST, "/v1/sandboxes/b/files/mkdir?path=d", replies=[{"ok": True}])
api("list", GET, "/v1/sandboxes/b/files/list?path=.&depth=2",
    replies=[{"entries": [{"path": "a", "type": "file", "size": 1}], "truncated": False}])
api("stat", GET, "/v1/sandboxes/b/files/stat?path=a", replies=[{"entry": {"path": "a", "type": "file"}}])
api("patch", POST, "/v1/sandboxes/b/patch", {"patch": "*** Begin Patch\n*** Add File: n\n+x\n*** End Patch\n"},
    [{"ok": True, "files": ["n"]}])
api("image", GET, "/v1/sandboxes/b/image?path=a.png", replies=[({"ok": True}, png)])
api("archive_get", GET, "/v1/sandboxes/b/archive", replies=[({"ok": True}, entry("d", "a", mode=0o755)
    + entry("f", "a/b", b"hi"))])
api("archive_put", PUT, "/v1/sandboxes/b/archive", tar(files), [{"ok": True}])
api("list_sandboxes", GET, "/v1/sandboxes?metadata.k=v")
api("get_delete", DELETE, "/v1/sandboxes/b")
api("healthz", GET, "/healthz")
api("metrics", GET, "/metrics")
api("agent_error", GET, "/v1/sandboxes/b/files?path=x", replies=[{"error": {"code": "not_found", "message": "no"}}])

# a deep tree (dir nesting past 64 levels, a file at the bottom)
deep = {"type": "file", "content": "x"}
for i in range(70):
    deep = {"type": "dir", "children": {"d": deep}}
put("fuzz_manifest", "deep.json", json.dumps({"entries": {"d": deep}}, separators=(",", ":")))

# the framer in front of evhttp: limits byte, split count, read mask, split
# lengths - 1, then the client's bytes
def guard(name, raw, limits=6, lens=(), reads=0xff):
    put("fuzz_http_guard", name, bytes([limits, len(lens), reads]) + bytes(lens) + raw)


guard("get", b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n")
guard("post_cl", b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n{\"a\":\"b\"}\r\n",
      lens=(9, 30, 3), reads=0x05)
guard("post_chunked", b"POST /v1/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      b"5\r\nhello\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", lens=(40, 6, 2, 1), reads=0x0a)
guard("pipelined", b"GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"
      b"\r\nGET /c HTTP/1.0\r\nConnection: close\r\n\r\n", lens=(17, 0, 20))
guard("over_cl", b"PUT /v1/f HTTP/1.1\r\nAuthorization: Bearer t\r\nContent-Length: 900\r\n\r\n"
      + b"x" * 900 + b"GET / HTTP/1.1\r\n\r\n", limits=4)
guard("over_chunked", b"POST /v1/f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      b"10\r\n0123456789abcdef\r\n400\r\n" + b"y" * 1024 + b"\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
      limits=3)
guard("over_head", b"GET / HTTP/1.1\r\nX: " + b"a" * 70000 + b"\r\n\r\n", lens=(200,))
guard("obs_fold", b"GET / HTTP/1.1\r\nX-A: 1\r\n b\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
guard("chunk_ext", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n0\r\n\r\n")
guard("both", b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
guard("lf_only", b"\r\n\nGET /x?y=1 HTTP/1.1\nHost: a\n\nHEAD / HTTP/1.1\nContent-Length: 0\n\n")

# MCP: the messages an MCP client POSTs to /mcp (one JSON-RPC message each)
def rpc(name, obj):
    put("fuzz_mcp", name, json.dumps(obj, separators=(",", ":")))


rpc("initialize", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                   "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                              "clientInfo": {"name": "c", "version": "1"}}})
rpc("initialized", {"jsonrpc": "2.0", "method": "notifications/initialized"})
rpc("tools_list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
rpc("ping", {"jsonrpc": "2.0", "id": "p", "method": "ping"})
rpc("call_exec", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "exec", "arguments": {"id": "abc", "cmd": ["ls", "-l"],
                                                           "cwd": "/workspace", "timeout_ms": 1000,
                                                           "yield_ms": 0},
                             "_meta": {"progressToken": 5}}})
rpc("call_stdin", {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": "write_stdin",
                              "arguments": {"id": "abc", "process_id": 7, "data": "y\n"}}})
rpc("call_write", {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                   "params": {"name": "write_file",
                              "arguments": {"id": "abc", "path": "a.txt", "content": "hi\n"}}})
rpc("call_create", {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                    "params": {"name": "sandbox_create",
                               "arguments": {"image": "host", "network": {"allow": ["x.org"]},
                                             "manifest": {"entries": {}}}}})
rpc("call_ls", {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                "params": {"name": "list_files", "arguments": {"id": "abc", "path": ".", "depth": 3}}})
rpc("cancelled", {"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 2, "reason": "stop"}})
rpc("response", {"jsonrpc": "2.0", "id": 9, "result": {}})
put("fuzz_mcp", "batch", '[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
put("fuzz_mcp", "origin", "http://localhost:7070")
put("fuzz_mcp", "origin6", "https://[::1]:8443")
put("fuzz_mcp", "session", "0123456789abcdef0123456789abcdef")

# ---- fuzz_dns: queries as a sandbox's resolver gets them
def dnsq(labels, qid=0x1234, qtype=1, flags=0x0100, extra=b""):
    b = struct.pack(">HHHHHH", qid, flags, 1, 0, 0, 1 if extra else 0)
    for lab in labels:
        b += bytes([len(lab)]) + lab
    return b + b"\0" + struct.pack(">HH", qtype, 1) + extra


put("fuzz_dns", "a", dnsq([b"registry", b"npmjs", b"org"]))
put("fuzz_dns", "aaaa_edns", dnsq([b"Example", b"COM"], qtype=28,
                                  extra=b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00"))
put("fuzz_dns", "root", dnsq([]))
put("fuzz_dns", "escapes", dnsq([b"\x1b[31m", b"a.b\\c", b"x" * 63]))
put("fuzz_dns", "pointer", dnsq([b"x"])[:12] + b"\xc0\x0c\x00\x01\x00\x01")


# layer tars (fuzz_unpack): first byte 0 = the tar as is, 1 = gzip'd by the target
def layer(entries):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            ti = tarfile.TarInfo(e[1])
            ti.type = e[0]
            data = e[2] if len(e) > 2 and e[0] == tarfile.REGTYPE else b""
            if e[0] in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                ti.linkname = e[2]
            ti.mode = e[3] if len(e) > 3 else 0o644
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return b.getvalue()


R, D, S, H = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
put("fuzz_unpack", "normal", b"\0" + layer([(D, "./", b"", 0o755), (D, "etc/", b"", 0o755),
                                             (R, "etc/hosts", b"127.0.0.1 x\n"), (R, "bin/sh", b"#!", 0o4755),
                                             (S, "bin/ls", "sh"), (H, "etc/hl", "etc/hosts"),
                                             (R, "etc/.wh.motd"), (D, "opt/", b"", 0o755),
                                             (R, "opt/.wh..wh..opq")]))
put("fuzz_unpack", "normal-gz", b"\1" + layer([(R, "a", b"a" * 100), (D, "d/", b"", 0o1777)]))
put("fuzz_unpack", "dotdot", b"\0" + layer([(R, "../escape", b"x"), (R, "a/../../b", b"y")]))
put("fuzz_unpack", "symlink-write", b"\0" + layer([(S, "l", "/tmp"), (R, "l/pwn", b"x"),
                                                    (S, "m", "../../.."), (R, "m/etc/x", b"y")]))
put("fuzz_unpack", "hardlink-out", b"\0" + layer([(H, "shadow", "/etc/shadow"), (S, "e", "/etc"),
                                                   (H, "s2", "e/shadow"), (H, "s3", "../etc/shadow")]))

# image archive documents (fuzz_layout): first byte picks the parser (0 index.json,
# 1 manifest.json, 2 oci-layout) and the name asked (4: "latest", 8: "busybox")
DG = "sha256:" + "a" * 64
put("fuzz_layout", "index", b"\4" + json.dumps({"schemaVersion": 2, "manifests": [
    {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": DG, "size": 503,
     "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}).encode())
put("fuzz_layout", "docker", b"\x09" + json.dumps([{"Config": "a" * 64 + ".json", "RepoTags": ["busybox:latest"],
                                                   "Layers": ["abc/layer.tar", "blobs/sha256/" + "b" * 64]}]).encode())
put("fuzz_layout", "layout", b"\2" + b'{"imageLayoutVersion":"1.0.0"}')
