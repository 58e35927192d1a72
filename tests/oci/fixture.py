"""Shared OCI test fixture: a real registry on loopback, images built
offline, and hostile registries.

- `Registry`: Debian's `docker-registry serve CONFIG` on 127.0.0.1 on a free
  port with a temp storage dir; ready once `GET /v2/` answers 200.
- `build_image(kind, dest)`: an OCI layout dir (tag "latest") built offline
  with umoci from /bin/busybox (busybox-static). Kinds:
    "one"   one layer: bin/busybox and a few applet links, etc/.
    "multi" the same lower layer, plus an upper layer with a whiteout
            (etc/motd removed), an opaque directory (opt/app replaced), a
            hard link and a file whose path is longer than 100 characters.
    "big"   the lower layer plus a layer of about `big_mb` MB of files
            copied from /usr/lib (benchmarks).
  The layers are written with Python's tarfile (exact control of the
  whiteout / opaque / link entries) and added with `umoci raw add-layer`,
  so no root and no unpack are needed.
- `push(layout, url_ref)`: `skopeo copy --dest-tls-verify=false
  oci:DIR:latest docker://HOST:PORT/REPO:TAG`.
- `Hostile`: a tiny http.server on loopback serving one OCI layout as a
  registry, with faults: a tampered blob, lying sizes, an endless body,
  a Bearer challenge with a token endpoint (Basic creds checked), blob
  redirects to a second server. Every request is recorded (method, path,
  headers) so tests can assert what a server received.

Use from tests/e2e (run.sh copies this file to <tests>/oci/fixture.py):
    import sys; from pathlib import Path
    _h = Path(__file__).resolve().parent
    sys.path[:0] = [str(_h / "oci"), str(_h.parent / "oci")]
    from fixture import registry, oci_images, pushed, build_image, Hostile  # noqa

pytest fixtures (imported into a test module as above): `registry` (session: a started Registry),
`oci_images` (session: {"one": dir, "multi": dir}, built once).
Everything is stdlib only (Debian's /usr/bin/python3).
"""
import base64
import contextlib
import hashlib
import http.server
import io
import json
import os
import shutil
import socket
import socketserver
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

try:
    import pytest
except ImportError:  # usable without pytest (bench/)
    pytest = None

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "ls", "cat", "echo", "true", "false", "id", "env", "sleep", "rm",
           "mkdir", "touch", "stat", "readlink", "test"]
# the upper layer of "multi"
LONG_NAME = "opt/" + "/".join(["d" * 40, "e" * 40, "f" * 40]) + "/long-file-name.txt"
MULTI_FACTS = {
    "removed": "etc/motd",            # whiteout .wh.motd
    "opaque": "opt/app",              # .wh..wh..opq: lower's old.txt hidden
    "opaque_hidden": "opt/app/old.txt",
    "opaque_new": "opt/app/new.txt",
    "hardlink": ("opt/hl-target", "opt/hl-link"),
    "long": LONG_NAME,
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s%s" % (" ".join(map(str, cmd)), r.returncode,
                                                     r.stdout, r.stderr))
    return r


# ---- the real registry -------------------------------------------------------

class Registry:
    def __init__(self, tmp=None):
        self.tmp = Path(tmp or tempfile.mkdtemp(prefix="moat-reg-"))
        self.own_tmp = tmp is None
        self.port = free_port()
        self.host = "127.0.0.1:%d" % self.port
        self.url = "http://" + self.host
        self.proc = None

    def start(self):
        store = self.tmp / "storage"
        store.mkdir(parents=True, exist_ok=True)
        cfg = self.tmp / "config.yml"
        cfg.write_text(
            "version: 0.1\n"
            "log:\n  level: error\n  accesslog:\n    disabled: true\n"
            "storage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\n"
            "http:\n  addr: 127.0.0.1:%d\n" % (store, self.port))
        self.log = open(self.tmp / "registry.log", "wb")
        self.proc = subprocess.Popen(["docker-registry", "serve", str(cfg)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("docker-registry exited: " +
                                   (self.tmp / "registry.log").read_text(errors="replace"))
            try:
                with urllib.request.urlopen(self.url + "/v2/", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("docker-registry did not answer on " + self.url)
            time.sleep(0.05)

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self.log.close()
        if self.own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def ref(self, repo, tag="latest"):
        return "%s/%s:%s" % (self.host, repo, tag)

    def push(self, layout, repo, tag="latest"):
        push(layout, self.ref(repo, tag))
        return self.ref(repo, tag)

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()


def push(layout, ref, src_tag="latest"):
    """skopeo copy oci:LAYOUT:src_tag docker://ref (ref = host:port/repo:tag)."""
    _run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
          "oci:%s:%s" % (layout, src_tag), "docker://" + ref])


# ---- building images offline -------------------------------------------------

def _ti(name, kind=tarfile.REGTYPE, mode=0o644, size=0, linkname=""):
    t = tarfile.TarInfo(name)
    t.type = kind
    t.mode = mode
    t.size = size
    t.linkname = linkname
    t.mtime = 1700000000
    t.uid = t.gid = 0
    t.uname = t.gname = "root"
    return t


def _add_dir(tf, name, mode=0o755):
    tf.addfile(_ti(name, tarfile.DIRTYPE, mode))


def _add_file(tf, name, data, mode=0o644):
    tf.addfile(_ti(name, size=len(data), mode=mode), io.BytesIO(data))


def _lower_tar(path):
    # PAX format: long names, as registries' images have
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for d in ["bin", "etc", "tmp", "opt", "opt/app", "root"]:
            _add_dir(tf, d, 0o1777 if d == "tmp" else 0o755)
        with open(BUSYBOX, "rb") as f:
            data = f.read()
        _add_file(tf, "bin/busybox", data, 0o755)
        for a in APPLETS:
            tf.addfile(_ti("bin/" + a, tarfile.SYMTYPE, 0o777, linkname="busybox"))
        _add_file(tf, "etc/motd", b"lower motd\n")
        _add_file(tf, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        _add_file(tf, "etc/group", b"root:x:0:\n")
        _add_file(tf, "opt/app/old.txt", b"lower old\n")
        _add_file(tf, "opt/keep.txt", b"kept from lower\n")


def _upper_tar(path):
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        _add_dir(tf, "etc")
        tf.addfile(_ti("etc/.wh.motd"))  # whiteout: etc/motd removed
        _add_dir(tf, "opt")
        _add_dir(tf, "opt/app")
        tf.addfile(_ti("opt/app/.wh..wh..opq"))  # opaque: lower's opt/app hidden
        _add_file(tf, "opt/app/new.txt", b"upper new\n")
        _add_file(tf, "opt/hl-target", b"hard linked\n")
        tf.addfile(_ti("opt/hl-link", tarfile.LNKTYPE, linkname="opt/hl-target"))
        parts = LONG_NAME.split("/")
        for i in range(2, len(parts)):
            _add_dir(tf, "/".join(parts[:i]))
        _add_file(tf, LONG_NAME, b"long name\n")


def _big_tar(path, mb):
    limit = mb * 1024 * 1024
    total = 0
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        _add_dir(tf, "usr")
        seen = set()
        for root, dirs, files in os.walk("/usr/lib"):
            dirs.sort()
            for fn in sorted(files):
                p = os.path.join(root, fn)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if not os.path.isfile(p) or os.path.islink(p) or st.st_size > 8 << 20:
                    continue
                rel = p.lstrip("/")
                d = os.path.dirname(rel)
                chain = []
                while d and d not in seen:
                    chain.append(d)
                    d = os.path.dirname(d)
                for c in reversed(chain):
                    seen.add(c)
                    _add_dir(tf, c)
                try:
                    with open(p, "rb") as f:
                        data = f.read()
                except OSError:
                    continue
                _add_file(tf, rel, data, st.st_mode & 0o755)
                total += len(data)
                if total >= limit:
                    return


def build_image(kind, dest, big_mb=80):
    """An OCI layout dir at dest (created), tag "latest"; returns dest."""
    dest = Path(dest)
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="moat-img-", dir=dest.parent))
    try:
        img = "%s:latest" % dest
        _run(["umoci", "init", "--layout", str(dest)])
        _run(["umoci", "new", "--image", img])
        _run(["umoci", "config", "--image", img, "--os", "linux",
              "--architecture", host_arch(), "--config.cmd", "/bin/sh",
              "--config.env", "PATH=/bin", "--config.env", "MOAT_IMAGE=" + kind,
              "--config.workingdir", "/root"])
        _lower_tar(work / "lower.tar")
        _run(["umoci", "raw", "add-layer", "--image", img, str(work / "lower.tar")])
        if kind == "multi":
            _upper_tar(work / "upper.tar")
            _run(["umoci", "raw", "add-layer", "--image", img, str(work / "upper.tar")])
        elif kind == "big":
            _big_tar(work / "big.tar", big_mb)
            _run(["umoci", "raw", "add-layer", "--image", img, str(work / "big.tar")])
        elif kind != "one":
            raise ValueError("unknown image kind " + kind)
        _run(["umoci", "gc", "--layout", str(dest)])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def host_arch():
    m = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386",
            "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64"}.get(m, m)


def layout_image(layout, tag="latest"):
    """(manifest bytes, manifest dict, {digest: path}) of a layout's tag."""
    layout = Path(layout)
    idx = json.loads((layout / "index.json").read_text())
    for m in idx["manifests"]:
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag:
            raw = blob_path(layout, m["digest"]).read_bytes()
            man = json.loads(raw)
            return raw, man, m["digest"]
    raise KeyError(tag)


def blob_path(layout, digest):
    alg, hx = digest.split(":", 1)
    return Path(layout) / "blobs" / alg / hx


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


# ---- hostile registries -------------------------------------------------------

class _TServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class Hostile:
    """A registry serving one OCI layout (repo `repo`, tag `tag`) with faults.

    faults (a set of names; change .faults between requests freely):
      "tamper"     the last layer's bytes changed (same length): digest mismatch
      "cl_big"     the last layer sent with 4096 extra bytes and a matching
                   Content-Length larger than the descriptor
      "cl_small"   Content-Length and body 1 byte shorter than the descriptor
      "overrun"    Content-Length = the descriptor, then more bytes anyway
                   (the connection is closed after)
      "endless"    no Content-Length: the right bytes, then garbage forever
                   (until the client hangs up)
      "bearer"     /v2/ and every repo request need `Authorization: Bearer T`;
                   401 with WWW-Authenticate: Bearer realm=URL/token,...
                   The token endpoint gives T anonymously, or, when `creds`
                   = (user, password) is set, only for that Basic auth (401
                   otherwise).
      "redirect"   blob GETs answer 307 to `redirect_to` (a base URL, e.g.
                   another Hostile's .url) + the same path
      "stall"      the last layer: half the bytes, then sleep `stall_s`
      "no_manifest_tag"  tag lookups answer 404 (digests still work)
    requests: a list of dicts {method, path, headers} (thread-safe append).
    """

    TOKEN = "moat-test-token-7f3a"

    def __init__(self, layout=None, repo="moat/test", tag="latest", faults=()):
        self.repo = repo
        self.tag = tag
        self.faults = set(faults)
        self.creds = None
        self.redirect_to = None
        self.stall_s = 60
        self.requests = []
        self.lock = threading.Lock()
        self.blobs = {}      # digest -> Path
        self.manifests = {}  # digest -> (bytes, media type)
        self.tag_digest = None
        self.last_layer = None
        if layout is not None:
            raw, man, dg = layout_image(layout, tag)
            self.manifests[dg] = (raw, man.get("mediaType",
                                               "application/vnd.oci.image.manifest.v1+json"))
            self.tag_digest = dg
            for d in [man["config"]] + man["layers"]:
                self.blobs[d["digest"]] = blob_path(layout, d["digest"])
            self.last_layer = man["layers"][-1]["digest"]
        self.port = free_port()
        self.host = "127.0.0.1:%d" % self.port
        self.url = "http://" + self.host
        self.ref = "%s/%s:%s" % (self.host, repo, tag)
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer._handle(self, head=False)

            def do_HEAD(self):
                outer._handle(self, head=True)

        self.server = _TServer(("127.0.0.1", self.port), H)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.stop()

    def received(self, path_prefix=""):
        with self.lock:
            return [r for r in self.requests if r["path"].startswith(path_prefix)]

    # -- handler
    def _send(self, h, code, body=b"", ctype="application/json", extra=(), head=False):
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        h.send_header("Docker-Distribution-API-Version", "registry/2.0")
        for k, v in extra:
            h.send_header(k, v)
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _err(self, h, code, what, head=False):
        body = json.dumps({"errors": [{"code": what, "message": what}]}).encode()
        self._send(h, code, body, head=head)

    def _authorized(self, h):
        if "bearer" not in self.faults:
            return True
        return h.headers.get("Authorization") == "Bearer " + self.TOKEN

    def _challenge(self, h, head):
        scope = "repository:%s:pull" % self.repo
        hdr = 'Bearer realm="%s/token",service="moat-test",scope="%s"' % (self.url, scope)
        body = json.dumps({"errors": [{"code": "UNAUTHORIZED"}]}).encode()
        self._send(h, 401, body, extra=[("WWW-Authenticate", hdr)], head=head)

    def _handle(self, h, head):
        path = h.path.split("?", 1)[0]
        with self.lock:
            self.requests.append({"method": h.command, "path": h.path,
                                  "headers": {k: v for k, v in h.headers.items()}})
        if path == "/token":
            if self.creds is not None:
                want = "Basic " + base64.b64encode(
                    ("%s:%s" % self.creds).encode()).decode()
                if h.headers.get("Authorization") != want:
                    return self._err(h, 401, "UNAUTHORIZED", head)
            return self._send(h, 200, json.dumps({"token": self.TOKEN}).encode(), head=head)
        if path in ("/v2/", "/v2"):
            if not self._authorized(h):
                return self._challenge(h, head)
            return self._send(h, 200, b"{}", head=head)
        pre = "/v2/%s/" % self.repo
        if not path.startswith(pre):
            return self._err(h, 404, "NAME_UNKNOWN", head)
        if not self._authorized(h):
            return self._challenge(h, head)
        rest = path[len(pre):]
        if rest.startswith("manifests/"):
            what = rest[len("manifests/"):]
            if what == self.tag and "no_manifest_tag" not in self.faults:
                what = self.tag_digest
            if what not in self.manifests:
                return self._err(h, 404, "MANIFEST_UNKNOWN", head)
            raw, mt = self.manifests[what]
            return self._send(h, 200, raw, mt, [("Docker-Content-Digest", what)], head)
        if rest.startswith("blobs/"):
            dg = rest[len("blobs/"):]
            if dg not in self.blobs:
                return self._err(h, 404, "BLOB_UNKNOWN", head)
            if "redirect" in self.faults and self.redirect_to:
                h.send_response(307)
                h.send_header("Location", self.redirect_to + path)
                h.send_header("Content-Length", "0")
                h.end_headers()
                return
            return self._blob(h, dg, head)
        return self._err(h, 404, "NAME_UNKNOWN", head)

    def _blob(self, h, dg, head):
        data = self.blobs[dg].read_bytes()
        f = self.faults if dg == self.last_layer else set()
        extra_after = b""
        close = False
        cl = len(data)
        if "tamper" in f:
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        if "cl_big" in f:
            data = data + b"\0" * 4096
            cl = len(data)
        if "cl_small" in f:
            data = data[:-1]
            cl = len(data)
        if "overrun" in f:
            extra_after = b"X" * 65536
            close = True
        h.send_response(200)
        h.send_header("Content-Type", "application/octet-stream")
        h.send_header("Docker-Content-Digest", dg)
        if "endless" in f:
            h.send_header("Connection", "close")
            h.end_headers()
            if head:
                return
            try:
                h.wfile.write(data)
                chunk = b"G" * 65536
                for _ in range(1 << 16):  # 4 GiB at most, then give up
                    h.wfile.write(chunk)
            except OSError:
                pass
            h.close_connection = True
            return
        h.send_header("Content-Length", str(cl))
        if close:
            h.send_header("Connection", "close")
        h.end_headers()
        if head:
            return
        try:
            if "stall" in f:
                h.wfile.write(data[:len(data) // 2])
                h.wfile.flush()
                time.sleep(self.stall_s)
                h.wfile.write(data[len(data) // 2:])
            else:
                h.wfile.write(data + extra_after)
        except OSError:
            pass
        if close:
            h.close_connection = True


class BlobMirror(Hostile):
    """A second server that serves blobs for any repo path (redirect target)."""

    def _handle(self, h, head):
        with self.lock:
            self.requests.append({"method": h.command, "path": h.path,
                                  "headers": {k: v for k, v in h.headers.items()}})
        path = h.path.split("?", 1)[0]
        dg = path.rsplit("/", 1)[-1]
        if "/blobs/" not in path or dg not in self.blobs:
            return self._err(h, 404, "BLOB_UNKNOWN", head)
        return self._blob(h, dg, head)


def docker_auth_file(path, host, user, password):
    """A docker config.json with Basic creds for host."""
    auth = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    Path(path).write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return path


# ---- pytest fixtures -----------------------------------------------------------

if pytest is not None:
    @pytest.fixture(scope="session")
    def registry():
        r = Registry().start()
        try:
            yield r
        finally:
            r.stop()

    @pytest.fixture(scope="session")
    def oci_images():
        """{"one": layout dir, "multi": layout dir}, built once per session."""
        d = Path(tempfile.mkdtemp(prefix="moat-oci-imgs-"))
        os.chmod(d, 0o755)
        try:
            yield {k: build_image(k, d / k) for k in ("one", "multi")}
        finally:
            shutil.rmtree(d, ignore_errors=True)

    @pytest.fixture(scope="session")
    def pushed(registry, oci_images):
        """{"one": ref, "multi": ref} pushed to the session registry."""
        return {k: registry.push(v, "moat/" + k) for k, v in oci_images.items()}


@contextlib.contextmanager
def hostile(layout, faults=(), **kw):
    h = Hostile(layout, faults=faults, **kw).start()
    try:
        yield h
    finally:
        h.stop()


if __name__ == "__main__":
    # smoke test: build both, push both, list
    with tempfile.TemporaryDirectory() as t, Registry() as reg:
        for k in ("one", "multi"):
            lay = build_image(k, Path(t) / k)
            print(k, reg.push(lay, "moat/" + k), layout_image(lay)[2])
