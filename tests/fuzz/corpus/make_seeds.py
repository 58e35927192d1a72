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
