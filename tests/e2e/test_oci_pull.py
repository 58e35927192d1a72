"""OCI pull (src/oci/registry.c) through build/.../oci-tool, against
Debian's docker-registry on loopback and hostile registries (tests/oci/
fixture.py). Every check is made on the host: the blob files' sha256
computed here, the store's directories listed, what each server received.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_h = Path(__file__).resolve().parent
sys.path[:0] = [str(_h / "oci"), str(_h.parent / "oci")]
import fixture  # noqa: E402
from fixture import registry, oci_images, pushed  # noqa: E402,F401

from conftest import MOAT, force_rmtree  # noqa: E402

OCI_TOOL = str(Path(MOAT).parent / "oci-tool")


@pytest.fixture
def store(tmp_path):
    d = tmp_path / "store"
    yield d
    force_rmtree(d)


def tool(*args, timeout=120):
    assert os.access(OCI_TOOL, os.X_OK), "%s not built (make oci-tool)" % OCI_TOOL
    return subprocess.run([OCI_TOOL, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def pull(ref, store, *extra):
    return tool("pull", ref, "--store", store, "--insecure", *extra)


def listing(store):
    """{relative path: size} of everything under the store's blobs/ and tmp/."""
    out = {}
    for sub in ("blobs", "tmp"):
        for root, dirs, files in os.walk(Path(store) / sub):
            for f in files:
                p = Path(root) / f
                out[str(p.relative_to(store))] = p.stat().st_size
    return out


def blob_files(store):
    return sorted(p.name for p in (Path(store) / "blobs" / "sha256").iterdir())


def opened(store):
    """The store created and empty (oci-tool open), as a pull finds it."""
    r = tool("open", "--store", store)
    assert r.returncode == 0, r.stderr
    assert listing(store) == {}
    return listing(store)


def check_pulled(store, layout, out):
    """Every blob of the layout's image is in the store with its sha256, and
    nothing else is."""
    raw, man, mdigest = fixture.layout_image(layout)
    img = json.loads(out)
    assert img["manifest"] == mdigest
    want = {mdigest} | {man["config"]["digest"]} | {l["digest"] for l in man["layers"]}
    assert {"sha256:" + n for n in blob_files(store)} == want
    for d in want:
        p = Path(store) / "blobs" / "sha256" / d.split(":", 1)[1]
        assert fixture.sha256_file(p) == d, p
    assert [l["digest"] for l in img["layers"]] == [l["digest"] for l in man["layers"]]
    assert list((Path(store) / "tmp").iterdir()) == []
    return img


# ---- the real registry --------------------------------------------------------

def test_pull_one_layer(pushed, oci_images, store):
    r = pull(pushed["one"], store)
    assert r.returncode == 0, r.stderr
    img = check_pulled(store, oci_images["one"], r.stdout)
    assert len(img["layers"]) == 1
    assert img["config"]["Cmd"] == ["/bin/sh"]
    assert "MOAT_IMAGE=one" in img["config"]["Env"]
    assert img["config"]["WorkingDir"] == "/root"
    assert img["config"]["architecture"] == fixture.host_arch()


def test_pull_multi_layer_and_again(pushed, oci_images, store):
    r = pull(pushed["multi"], store)
    assert r.returncode == 0, r.stderr
    img = check_pulled(store, oci_images["multi"], r.stdout)
    assert len(img["layers"]) == 2
    # diff_ids are the config's, one per layer
    assert all(l["diff_id"].startswith("sha256:") for l in img["layers"])
    before = {n: os.stat(Path(store) / "blobs/sha256" / n).st_ino for n in blob_files(store)}
    # a second pull finds every blob there: same files, untouched
    r = pull(pushed["multi"], store)
    assert r.returncode == 0, r.stderr
    after = {n: os.stat(Path(store) / "blobs/sha256" / n).st_ino for n in blob_files(store)}
    assert after == before


def test_pull_by_digest(registry, pushed, oci_images, store):
    _, _, mdigest = fixture.layout_image(oci_images["one"])
    ref = "%s/moat/one@%s" % (registry.host, mdigest)
    r = pull(ref, store)
    assert r.returncode == 0, r.stderr
    check_pulled(store, oci_images["one"], r.stdout)


def test_missing_tag_named(registry, pushed, store):
    opened(store)
    r = pull(registry.ref("moat/one", "no-such-tag"), store)
    assert r.returncode == 1
    assert "no-such-tag" in r.stderr and "not found" in r.stderr, r.stderr
    assert listing(store) == {}


def test_plain_http_needs_insecure(pushed, store):
    opened(store)
    r = tool("pull", pushed["one"], "--store", store)
    assert r.returncode == 1
    assert "https" in r.stderr.lower() or "ssl" in r.stderr.lower() or "tls" in r.stderr.lower(), r.stderr
    assert listing(store) == {}


def test_store_room_refused(pushed, store):
    opened(store)
    r = pull(pushed["one"], store, "--max", "1000")
    assert r.returncode == 1
    assert "room" in r.stderr, r.stderr
    assert listing(store) == {}


# ---- hostile registries --------------------------------------------------------

def test_tampered_blob_refused_nothing_stored(oci_images, store):
    with fixture.hostile(oci_images["multi"], {"tamper"}) as h:
        opened(store)
        r = pull(h.ref, store)
        assert r.returncode == 1
        assert h.last_layer in r.stderr and "digest mismatch" in r.stderr, r.stderr
        # the good lower layer and the config were fetched, and are not kept
        _, man, _ = fixture.layout_image(oci_images["multi"])
        for d in (man["config"]["digest"], man["layers"][0]["digest"]):
            assert any(q["path"].endswith(d) for q in h.received("/v2/")), d
        assert listing(store) == {}


@pytest.mark.parametrize("fault", ["cl_big", "cl_small", "endless"])
def test_lying_sizes_refused_nothing_stored(oci_images, store, fault):
    with fixture.hostile(oci_images["one"], {fault}) as h:
        opened(store)
        r = pull(h.ref, store)
        assert r.returncode == 1, r.stdout
        assert h.last_layer in r.stderr, r.stderr
        assert ("announced" in r.stderr), r.stderr
        assert listing(store) == {}


def test_docker_content_digest_lie_refused(oci_images, store):
    with fixture.hostile(oci_images["one"], {"bad_cdigest"}) as h:
        opened(store)
        r = pull(h.ref, store)
        assert r.returncode == 1
        assert "Docker-Content-Digest" in r.stderr, r.stderr
        assert listing(store) == {}


def test_index_picks_host_platform(oci_images, store):
    plats = [("linux", "s390x" if fixture.host_arch() != "s390x" else "ppc64le"),
             ("linux", fixture.host_arch()), ("windows", fixture.host_arch())]
    with fixture.hostile(oci_images["one"], index_platforms=plats) as h:
        r = pull(h.ref, store)
        assert r.returncode == 0, r.stderr
        check_pulled(store, oci_images["one"], r.stdout)
        fetched = [q["path"] for q in h.received("/v2/moat/test/manifests/")]
        # the tag (the index), then the host's manifest, nothing else
        _, _, mdigest = fixture.layout_image(oci_images["one"])
        assert fetched == ["/v2/moat/test/manifests/latest",
                           "/v2/moat/test/manifests/" + mdigest]


def test_index_without_host_platform_lists_them(oci_images, store):
    with fixture.hostile(oci_images["one"], index_platforms=[("linux", "s390x-nope"),
                                                            ("plan9", "amd64")]) as h:
        opened(store)
        r = pull(h.ref, store)
        assert r.returncode == 1
        assert "linux/s390x-nope" in r.stderr and "plan9/amd64" in r.stderr, r.stderr
        assert listing(store) == {}


def test_bearer_anonymous(oci_images, store):
    with fixture.hostile(oci_images["one"], {"bearer"}) as h:
        r = pull(h.ref, store)
        assert r.returncode == 0, r.stderr
        check_pulled(store, oci_images["one"], r.stdout)
        toks = h.received("/token")
        assert len(toks) == 1
        assert "scope=repository%3Amoat%2Ftest%3Apull" in toks[0]["path"]
        assert "service=moat-test" in toks[0]["path"]
        assert "Authorization" not in toks[0]["headers"]
        blobs = h.received("/v2/moat/test/blobs/")
        assert blobs and all(q["headers"].get("Authorization") == "Bearer " + h.TOKEN
                             for q in blobs)


def test_bearer_with_credentials(oci_images, store, tmp_path):
    with fixture.hostile(oci_images["one"], {"bearer"}) as h:
        h.creds = ("moat", "s3cret")
        opened(store)
        # no credentials: the token is refused, nothing stored
        r = pull(h.ref, store)
        assert r.returncode == 1
        assert "token refused" in r.stderr, r.stderr
        assert listing(store) == {}
        # wrong ones: refused too
        bad = fixture.docker_auth_file(tmp_path / "bad.json", h.host, "moat", "wrong")
        r = pull(h.ref, store, "--auth", bad)
        assert r.returncode == 1 and "token refused" in r.stderr, r.stderr
        assert listing(store) == {}
        # the right ones, from a docker config.json
        good = fixture.docker_auth_file(tmp_path / "good.json", h.host, "moat", "s3cret")
        r = pull(h.ref, store, "--auth", good)
        assert r.returncode == 0, r.stderr
        check_pulled(store, oci_images["one"], r.stdout)


def test_redirect_followed_auth_not_forwarded(oci_images, store):
    with fixture.hostile(oci_images["multi"], {"bearer", "redirect"}) as h, \
            fixture.BlobMirror(oci_images["multi"]) as mirror:
        h.redirect_to = mirror.url
        r = pull(h.ref, store)
        assert r.returncode == 0, r.stderr
        check_pulled(store, oci_images["multi"], r.stdout)
        got = mirror.received("/")
        # config + 2 layers fetched from the mirror, none with our token
        assert len(got) == 3, got
        for q in got:
            assert "Authorization" not in q["headers"], q
        # while the registry itself got the token on the same requests
        assert all(q["headers"].get("Authorization") == "Bearer " + h.TOKEN
                   for q in h.received("/v2/moat/test/blobs/"))


def test_killed_mid_blob_leaves_no_blob(oci_images, store):
    with fixture.hostile(oci_images["one"], {"stall"}) as h:
        h.stall_s = 120
        opened(store)
        p = subprocess.Popen([OCI_TOOL, "pull", h.ref, "--store", str(store), "--insecure"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            tmp = Path(store) / "tmp"
            deadline = time.monotonic() + 60
            # wait for the half-written layer (the stall keeps it half)
            while not any(f.stat().st_size > 0 for f in tmp.iterdir()):
                assert p.poll() is None, p.stderr.read()
                assert time.monotonic() < deadline, "no partial blob appeared"
                time.sleep(0.05)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
        left = listing(store)
        assert blob_files(store) == []  # nothing committed, not even the config
        assert any(k.startswith("tmp/") for k in left)
        # the next open empties tmp/
        r = tool("open", "--store", store)
        assert r.returncode == 0, r.stderr
        assert listing(store) == {}
