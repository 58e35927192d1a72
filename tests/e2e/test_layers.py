"""Images made of layers: `moat run --rootfs TOP --rootfs ... --rootfs BASE`
(the first given on top) is one overlay whose lowers are the layers, each
bound (rootless) or id-mapped on its own (root) at a neutral path, and
`--rootfs-upper DIR` keeps the image's changes in DIR/upper on disk.

The layers are made here by hand from busybox-static, as the unpacker
leaves them: a whiteout is a 0/0 character device (which an unprivileged
user may create too), an opaque directory carries user.overlay.opaque=y
(and trusted.overlay.opaque=y where permitted: root). Everything is
checked from the host (the upper's files and owners, the layers' hashes)
or from inside through the kernel's own view (ls, mountinfo)."""
import os
import shutil
import stat
import subprocess

import pytest

from conftest import IS_ROOT, MOAT, snapshot, diff_snap, wait_until

BUSYBOX = "/bin/busybox"
APPLETS = ["sh", "ls", "cat", "echo", "id", "rm", "mkdir", "grep", "test",
           "sleep", "stat"]

pytestmark = pytest.mark.skipif(not os.path.exists(BUSYBOX),
                                reason="no busybox-static (scripts/deps.sh)")


def whiteout(path):
    os.mknod(path, stat.S_IFCHR | 0o600, 0)


def opaque(path):
    os.setxattr(path, "user.overlay.opaque", b"y")
    try:
        os.setxattr(path, "trusted.overlay.opaque", b"y")
    except PermissionError:
        pass  # unprivileged: the user. mark is the one read inside


def inside_ids():
    """The sandbox's uid and gid: 1000 under root, the caller's rootless."""
    return (1000, 1000) if IS_ROOT else (os.getuid(), os.getgid())


@pytest.fixture
def layers(base):
    """Three layers, top first: top, mid, bottom (busybox and the rest)."""
    top, mid, bot = base / "l-top", base / "l-mid", base / "l-bot"
    uid, gid = inside_ids()
    (bot / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, bot / "bin" / "busybox")
    for a in APPLETS:
        os.symlink("busybox", bot / "bin" / a)
    (bot / "etc").mkdir()
    # the accounts live only in the bottom layer: read top-down, they name
    # the sandbox's ids and are kept as they are
    (bot / "etc" / "passwd").write_text(f"imguser:x:{uid}:{gid}:img:/:/bin/sh\n")
    (bot / "etc" / "group").write_text(f"imggroup:x:{gid}:\n")
    (bot / "gone").write_text("from the bottom layer\n")
    (bot / "bottom-only").write_text("bottom\n")
    (bot / "opq").mkdir()
    (bot / "opq" / "old").write_text("hidden by the opaque dir above\n")
    (bot / "keep").mkdir()
    (bot / "keep" / "b").write_text("b\n")

    mid.mkdir()
    (mid / "mid-only").write_text("mid\n")
    (mid / "opq").mkdir()
    (mid / "opq" / "midfile").write_text("hidden too\n")
    (mid / "keep").mkdir()
    (mid / "keep" / "m").write_text("m\n")

    top.mkdir()
    (top / "etc").mkdir()  # an etc/ of its own, without passwd
    (top / "etc" / "hostname").write_text("layered\n")
    whiteout(top / "gone")
    (top / "opq").mkdir()
    (top / "opq" / "new").write_text("new\n")
    opaque(top / "opq")
    (top / "top-only").write_text("top\n")
    for d in (top, mid, bot):
        os.chmod(d, 0o755)
    return [top, mid, bot]


def rootfs_args(ls):
    out = []
    for layer in ls:
        out += ["--rootfs", str(layer)]
    return out


def sh(ws, args, script, **kw):
    return subprocess.run([MOAT, "run", "-w", str(ws), *args, "--", "/bin/sh", "-c", script],
                          cwd=str(ws), capture_output=True, text=True, timeout=60, **kw)


def test_layers_stack_with_whiteouts_and_opaque_dirs(ws, layers):
    before = {str(d): snapshot(d) for d in layers}
    r = sh(ws, rootfs_args(layers),
           "echo opq:$(ls /opq); echo keep:$(ls /keep); "
           "test -e /gone && echo gone-visible; "
           "cat /top-only /mid-only /bottom-only; id -un; "
           "cat /proc/self/mountinfo")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    # the opaque directory shows only the top layer's children
    assert "opq:new\n" in out, out
    # a plain directory merges every layer's
    assert "keep:b m\n" in out, out
    # the whiteout hides the bottom layer's file
    assert "gone-visible" not in out, out
    assert "top\nmid\nbottom\n" in out, out
    # accounts: the bottom layer's passwd (no layer above has one), kept
    assert "imguser\n" in out, out
    over = [ln for ln in out.splitlines() if " - overlay " in ln]
    assert len(over) == 1, out
    assert "lowerdir=/ovl/l0:/ovl/l1:/ovl/l2," in over[0], over
    assert "userxattr" in over[0], over
    for d in layers:
        assert str(d) not in out, f"host path {d} in the sandbox's mountinfo"
    for d in layers:
        assert snapshot(d) == before[str(d)], diff_snap(before[str(d)], snapshot(d))


def test_upper_on_disk_keeps_changes_across_runs(ws, base, layers):
    before = {str(d): snapshot(d) for d in layers}
    upper = base / "upper"
    upper.mkdir()
    owner = (os.getuid(), os.getgid())
    if IS_ROOT:
        # root: what the sandbox writes belongs to the directory's owner
        owner = (4242, 4243)
        os.chown(upper, *owner)
    args = rootfs_args(layers) + ["--rootfs-upper", str(upper)]
    r = sh(ws, args, "echo first > /made && rm /top-only && rm -r /opq && "
                     "mkdir /opq && echo again > /opq/x && id -u && stat -c %u /made")
    assert r.returncode == 0, r.stderr
    uid, _ = inside_ids()
    assert r.stdout.split() == [str(uid), str(uid)], r.stdout
    made = upper / "upper" / "made"
    assert made.read_text() == "first\n"
    st = os.lstat(made)
    assert (st.st_uid, st.st_gid) == owner
    # the deletion is a whiteout in the upper, the layer keeps its file
    wo = os.lstat(upper / "upper" / "top-only")
    assert stat.S_ISCHR(wo.st_mode) and wo.st_rdev == 0
    # the directory made anew over the layers' is opaque (user. xattr)
    assert os.getxattr(upper / "upper" / "opq", "user.overlay.opaque") == b"y"
    for d in layers:
        assert snapshot(d) == before[str(d)], diff_snap(before[str(d)], snapshot(d))

    # leftovers of an earlier mount in work/: the mode-000 work/work the
    # first run left, with an incompat/volatile in it (a volatile mount's
    # mark, which overlayfs refuses to mount over); the start clears them
    ww = upper / "work" / "work"
    assert stat.S_IMODE(os.lstat(ww).st_mode) == 0
    os.chmod(ww, 0o700)
    (ww / "incompat" / "volatile").mkdir(parents=True)
    os.chmod(ww, 0)
    r = sh(ws, args, "cat /made; test -e /top-only && echo back; echo opq:$(ls /opq)")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "first\nopq:x\n", r.stdout
    os.chmod(ww, 0o700)
    assert not (ww / "incompat").exists()
    for d in layers:
        assert snapshot(d) == before[str(d)], diff_snap(before[str(d)], snapshot(d))


def test_upper_in_use_is_refused(ws, base, layers):
    upper = base / "upper"
    upper.mkdir()
    args = rootfs_args(layers) + ["--rootfs-upper", str(upper)]
    p = subprocess.Popen([MOAT, "run", "-w", str(ws), *args, "--", "/bin/sh", "-c",
                          "echo up > /started; exec sleep 60"], cwd=str(ws),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert wait_until(lambda: (upper / "upper" / "started").exists(), timeout=30)
        r = sh(ws, args, "echo second > /second")
        assert r.returncode == 125, r
        assert "in use by another sandbox" in r.stderr and str(upper) in r.stderr, r.stderr
        assert not (upper / "upper" / "second").exists()
    finally:
        p.kill()
        p.wait(timeout=30)
    # the sandbox gone, the upper is free again
    r = sh(ws, args, "cat /started")
    assert r.returncode == 0 and r.stdout == "up\n", r


def test_one_layer_is_the_plain_image(ws, layers):
    """--rootfs given once: the one-layer case as before (lowerdir
    /ovl/lower, changes in memory, gone after the run)."""
    r = sh(ws, ["--rootfs", str(layers[2])], "echo x > /w; cat /bottom-only; "
                                             "grep ' - overlay ' /proc/self/mountinfo")
    assert r.returncode == 0, r.stderr
    assert "bottom\n" in r.stdout
    assert "lowerdir=/ovl/lower," in r.stdout, r.stdout
    assert not (layers[2] / "w").exists()


def test_many_layers(ws, base, layers):
    """128 layers (the most) are stacked; 129 are refused."""
    extra = []
    for i in range(124):
        d = base / f"e{i}"
        d.mkdir()
        (d / f"f{i}").write_text(f"{i}\n")
        extra.append(d)
    ls = [layers[0]] + extra + layers[1:]
    assert len(ls) == 127
    d = base / "e-last"
    d.mkdir()
    ls.append(d)
    r = sh(ws, rootfs_args(ls), "cat /f0 /f123 /bottom-only")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "0\n123\nbottom\n"
    d = base / "e-over"
    d.mkdir()
    r = sh(ws, rootfs_args(ls + [d]), "echo ran")
    assert r.returncode == 125 and "ran" not in r.stdout
    assert "129 image layers: at most 128" in r.stderr, r.stderr


def test_bad_layers_refused(ws, base, layers):
    colon = base / "a:b"
    colon.mkdir()
    r = sh(ws, rootfs_args([colon] + layers), "echo ran")
    assert r.returncode == 125 and "ran" not in r.stdout
    assert str(colon) in r.stderr and "':'" in r.stderr, r.stderr

    missing = base / "no-such-layer"
    r = sh(ws, rootfs_args(layers + [missing]), "echo ran")
    assert r.returncode == 125 and "ran" not in r.stdout
    assert str(missing) in r.stderr and "No such file" in r.stderr, r.stderr

    f = base / "a-file"
    f.write_text("x")
    r = sh(ws, rootfs_args([f] + layers), "echo ran")
    assert r.returncode == 125 and str(f) in r.stderr and "Not a directory" in r.stderr, r

    r = sh(ws, rootfs_args([layers[0], layers[0]]), "echo ran")
    assert r.returncode == 125 and "overlap" in r.stderr, r.stderr

    up = base / "upper"
    r = sh(ws, ["--rootfs-upper", str(base)], "echo ran")
    assert r.returncode == 125 and "only with an image" in r.stderr, r.stderr
    r = sh(ws, rootfs_args(layers) + ["--rootfs-upper", str(up)], "echo ran")
    assert r.returncode == 125 and str(up) in r.stderr, r.stderr
    # an upper inside a layer would write into the image
    r = sh(ws, rootfs_args(layers) + ["--rootfs-upper", str(layers[1])], "echo ran")
    assert r.returncode == 125 and "overlap" in r.stderr, r.stderr
    # nothing was created by the refused runs
    assert not up.exists()
    assert not (layers[1] / "upper").exists()
