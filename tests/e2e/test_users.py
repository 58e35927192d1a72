"""Users mode (`moat run --users`, docs/policy.md "Users mode"): a sandbox
with root (0) and user (1000) inside, a host id range of its own, Docker's
capability set for root within the sandbox's user namespace only, and (run
as root) private copy-on-write system directories.

Every test asserts the host: files unchanged, absent or unreadable, host
uids of the sandbox's processes. Run as root and as moate2e (rootless:
needs an /etc/subuid range, which run.sh gives moate2e, and newuidmap)."""
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from conftest import (IS_ROOT, MOAT, SH, kill_pids, moat_env, proc_status,
                      sha, sleep_marker, sleep_started)

BAND = 0x80000000
# Docker's default set without NET_RAW and SETFCAP: CHOWN DAC_OVERRIDE FOWNER
# FSETID KILL SETGID SETUID SETPCAP NET_BIND_SERVICE SYS_CHROOT MKNOD AUDIT_WRITE
DOCKER_CAPS = 0x280405fb
CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_NET_ADMIN, CAP_SYS_MODULE = 21, 19, 12, 16


def _can_run_users():
    if IS_ROOT:
        return True, ""
    if not (os.access("/usr/bin/newuidmap", os.X_OK) and os.access("/usr/bin/newgidmap", os.X_OK)):
        return False, "newuidmap/newgidmap missing (Debian package uidmap)"
    import pwd
    name = pwd.getpwuid(os.geteuid()).pw_name
    for f in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(f).read_text().splitlines()
        except OSError:
            return False, f"no {f}"
        if not any(l.split(":")[0] in (name, str(os.geteuid())) and int(l.split(":")[2]) >= 65535
                   for l in lines if l.count(":") == 2):
            return False, f"no range for {name} in {f}"
    return True, ""


_ok, _why = _can_run_users()
pytestmark = pytest.mark.skipif(not _ok, reason=_why)


def users(run, script, *opts, root=False, **kw):
    extra = ["--users"] + (["--user", "root"] if root else [])
    return run.sh(script, *extra, *opts, **kw)


def status_field(text, key):
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].split()
    return None


# ---- identities -----------------------------------------------------------------

def test_default_user_is_1000_in_home_user(run):
    r = users(run, 'id -u; id -g; id -un; echo "$HOME $USER"; ls -ldn /home/user | '
              'cut -d" " -f1,3,4; getent passwd root user | cut -d: -f1,3,6,7')
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == ["1000", "1000", "user"]
    assert lines[3] == "/home/user user"
    assert lines[4].split()[1:] == ["1000", "1000"]
    assert "root:0:/root:/bin/bash" in lines
    assert "user:1000:/home/user:/bin/bash" in lines


def test_root_is_uid_0(run):
    r = users(run, 'id -u; id -un; echo "$HOME $USER"', root=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["0", "root", "/root root"]


def test_user_option_needs_users(run):
    r = run.sh("true", "--user", "root")
    assert r.returncode == 125 and "--users" in r.stderr


def test_users_refuses_other_views(run):
    r = users(run, "true", "--mode", "read-only")
    assert r.returncode == 125 and "users mode" in r.stderr


# ---- capabilities ------------------------------------------------------------------

def test_capabilities_root_docker_set_user_none(run):
    script = "grep -E '^Cap(Eff|Prm|Bnd|Amb|Inh)' /proc/self/status"
    root = users(run, script, root=True)
    user = users(run, script)
    assert root.returncode == 0 and user.returncode == 0, root.stderr + user.stderr
    for k in ("CapEff", "CapPrm", "CapBnd"):
        assert int(status_field(root.stdout, k)[0], 16) == DOCKER_CAPS, root.stdout
    assert int(status_field(root.stdout, "CapAmb")[0], 16) == 0
    for k in ("CapEff", "CapPrm", "CapAmb", "CapInh"):
        assert int(status_field(user.stdout, k)[0], 16) == 0, user.stdout
    for cap in (CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_NET_ADMIN, CAP_SYS_MODULE):
        assert not DOCKER_CAPS & (1 << cap)
    # no_new_privs and seccomp stay
    r = users(run, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status", root=True)
    assert "NoNewPrivs:\t1" in r.stdout and "Seccomp:\t2" in r.stdout


def test_user_cannot_become_root(run):
    r = users(run, "/usr/bin/python3 -c 'import os\n"
                   "try:\n os.setuid(0); print(\"ROOT\")\n"
                   "except PermissionError: print(\"refused\")'")
    assert r.stdout.strip() == "refused", r.stdout + r.stderr


def test_root_cannot_mount_unshare_ptrace(run):
    r = users(run, """
        mount -t tmpfs none /tmp 2>/dev/null && echo MOUNTED
        unshare -U true 2>/dev/null && echo UNSHARED
        unshare -m true 2>/dev/null && echo UNSHARED_M
        /usr/bin/python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print("PTRACED" if libc.ptrace(16, 1, 0, 0) == 0 else "ptrace refused")
'
        chroot / true 2>/dev/null && echo CHROOTED
        echo done""", root=True)
    out = r.stdout
    assert "done" in out, r.stderr
    for bad in ("MOUNTED", "UNSHARED", "PTRACED", "CHROOTED"):
        assert bad not in out, out


# ---- the host stays the host ---------------------------------------------------------

@pytest.fixture
def etc_secret():
    """Root pass: a root-only file and directory planted in host /etc."""
    if not IS_ROOT:
        pytest.skip("planting a file in /etc needs root")
    tag = uuid.uuid4().hex[:10]
    f = Path(f"/etc/moat-e2e-{tag}.key")
    d = Path(f"/etc/moat-e2e-{tag}.d")
    f.write_text("TOPSECRET-FILE\n")
    os.chmod(f, 0o600)
    d.mkdir(mode=0o700)
    (d / "inner").write_text("TOPSECRET-DIR\n")
    os.chmod(d / "inner", 0o644)
    yield f, d
    f.unlink()
    shutil.rmtree(d)


def test_root_cannot_read_root_only_host_files(run, etc_secret):
    f, d = etc_secret
    r = users(run, f"cat {f} {d}/inner /etc/shadow /etc/gshadow 2>&1; ls -A {d}; echo end",
              root=True)
    assert "TOPSECRET" not in r.stdout, r.stdout
    shadow = Path("/etc/shadow").read_text()
    assert "root:" not in r.stdout.replace("root:x:0:0", "")  # /etc/shadow's root line
    assert shadow.splitlines()[0] not in r.stdout
    assert r.stdout.rstrip().endswith("end")


def test_root_cannot_read_root_only_files_created_later(run):
    """Root pass: what host root makes root-only in /etc while a sandbox runs
    (a new 0700 directory, a key dropped into a root-only directory that
    was empty at start) stays out of the sandbox's root's reach."""
    if not IS_ROOT:
        pytest.skip("planting a file in /etc needs root")
    tag = uuid.uuid4().hex[:10]
    new = Path(f"/etc/moat-e2e-later-{tag}")
    empty = Path(f"/etc/moat-e2e-empty-{tag}")
    p = None
    try:
        empty.mkdir(mode=0o700)
        p = run.popen(["-w", run.ws, "--users", "--user", "root", "--", SH, "-c",
                       f"echo ready; read x; cat {new}/key {empty}/key 2>&1; echo end"],
                      text=True, stdin=subprocess.PIPE)
        assert p.stdout.readline().strip() == "ready"
        new.mkdir(mode=0o700)
        for d in (new, empty):
            k = d / "key"
            k.write_text(f"LATER-SECRET-{d.name}\n")
            os.chmod(k, 0o600)
        # the sandbox reads only once the keys are there (no sleep to outrun)
        out, err = p.communicate(input="\n", timeout=60)
        assert (new / "key").exists() and (empty / "key").exists()
        assert "LATER-SECRET" not in out, out + err
        assert out.rstrip().endswith("end"), out + err
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        shutil.rmtree(new, ignore_errors=True)
        shutil.rmtree(empty, ignore_errors=True)


def test_root_cannot_read_outside_paths(run, outside):
    secret = outside / "secret"
    secret.write_text("OUTSIDE-SECRET\n")
    home_secret = Path("/root/.moat-e2e-users-" + uuid.uuid4().hex[:8])
    planted = False
    if IS_ROOT:
        home_secret.write_text("ROOT-HOME-SECRET\n")
        os.chmod(home_secret, 0o600)
        planted = True
    try:
        r = users(run, f"cat {secret} {home_secret} 2>&1; echo end", root=True)
        assert "SECRET" not in r.stdout, r.stdout
    finally:
        if planted:
            home_secret.unlink()


def test_root_writes_stay_in_the_sandbox(run, outside):
    name = f"moat-e2e-users-{uuid.uuid4().hex[:8]}"
    before = {p: sha(p) for p in ("/etc/passwd", "/etc/group", "/etc/hostname")
              if os.path.exists(p)}
    target = outside / "f"
    target.write_text("host\n")
    r = users(run, f"""
        touch /usr/bin/{name} && echo made-usr
        echo x >> /etc/passwd && echo wrote-passwd
        echo x > /etc/{name} && echo made-etc
        echo pwned > {target} 2>/dev/null && echo WROTE-OUTSIDE
        ls /usr/bin/{name} /etc/{name} >/dev/null && echo seen-inside
        true""", root=True)
    assert "WROTE-OUTSIDE" not in r.stdout
    if IS_ROOT:
        # copy-on-write system directories: root changes its own copy
        assert "made-usr" in r.stdout and "made-etc" in r.stdout, r.stdout + r.stderr
        assert "wrote-passwd" in r.stdout and "seen-inside" in r.stdout
    else:
        # rootless: system directories stay read-only (docs: partial)
        assert "made-usr" not in r.stdout and "made-etc" not in r.stdout
    assert not os.path.lexists(f"/usr/bin/{name}")
    assert not os.path.lexists(f"/etc/{name}")
    assert {p: sha(p) for p in before} == before
    assert target.read_text() == "host\n"


def test_changes_do_not_outlive_the_sandbox(run):
    if not IS_ROOT:
        pytest.skip("rootless: system directories are read-only")
    name = f"moat-e2e-users-{uuid.uuid4().hex[:8]}"
    assert users(run, f"touch /usr/bin/{name}", root=True).returncode == 0
    r = users(run, f"ls /usr/bin/{name} 2>&1 || echo gone", root=True)
    assert "gone" in r.stdout


def test_user_cannot_change_system_dirs(run):
    name = f"moat-e2e-users-{uuid.uuid4().hex[:8]}"
    r = users(run, f"touch /usr/bin/{name} 2>/dev/null && echo MADE; "
                   f"echo x >> /etc/passwd 2>/dev/null && echo WROTE; echo end")
    assert "MADE" not in r.stdout and "WROTE" not in r.stdout and "end" in r.stdout
    assert not os.path.lexists(f"/usr/bin/{name}")


def test_workspace_files_owner_on_host(run, ws):
    r = users(run, "echo u > by-user")
    assert r.returncode == 0, r.stderr
    r = users(run, "echo r > by-root", root=True)
    assert r.returncode == 0, r.stderr
    st_u = os.stat(ws / "by-user")
    st_r = os.stat(ws / "by-root")
    # user's files are the workspace owner's; root's never host root's
    assert st_u.st_uid == os.stat(ws).st_uid
    assert st_r.st_uid != 0
    if IS_ROOT:
        assert st_r.st_uid >= BAND


# ---- host ids ----------------------------------------------------------------------

def _start_sleep(run, root):
    m = sleep_marker()
    extra = ["--users"] + (["--user", "root"] if root else [])
    p = run.popen(["-w", run.ws, *extra, "--", "sleep", m])
    pids = sleep_started(m)
    cmd = [x for x in pids if open(f"/proc/{x}/cmdline", "rb").read().startswith(b"sleep")]
    return p, pids, cmd


def test_processes_never_run_as_host_root(run):
    procs = []
    try:
        for root in (True, False):
            p, pids, cmd = _start_sleep(run, root)
            procs.append((p, pids))
            assert cmd, "sleep did not start"
            uids = proc_status(cmd[0])["Uid"].split()
            assert all(int(u) != 0 for u in uids), uids
            if IS_ROOT:
                assert all(int(u) >= BAND for u in uids), uids
            else:
                expect = os.geteuid() if not root else None
                if expect is not None:
                    assert all(int(u) == expect for u in uids), uids
    finally:
        for p, pids in procs:
            kill_pids(pids)
            p.kill()
            p.wait()


def test_two_sandboxes_have_different_host_ids(run):
    if not IS_ROOT:
        pytest.skip("rootless sandboxes share the caller's one subordinate range")
    procs = []
    try:
        uids = []
        for _ in range(2):
            p, pids, cmd = _start_sleep(run, True)
            procs.append((p, pids))
            assert cmd
            uids.append(int(proc_status(cmd[0])["Uid"].split()[0]))
        assert uids[0] != uids[1]
        assert abs(uids[0] - uids[1]) >= 65536
    finally:
        for p, pids in procs:
            kill_pids(pids)
            p.kill()
            p.wait()


def test_plain_run_unchanged(run):
    r = run.sh("id -u; grep CapEff /proc/self/status")
    assert r.returncode == 0
    assert int(status_field(r.stdout, "CapEff")[0], 16) == 0
    uid = r.stdout.splitlines()[0]
    assert uid == ("1000" if IS_ROOT else str(os.geteuid()))


def test_root_installs_a_local_deb_only_in_the_sandbox(run, ws):
    if not IS_ROOT:
        pytest.skip("rootless: system directories are read-only")
    if not shutil.which("dpkg-deb") or not shutil.which("apt-get"):
        pytest.skip("no dpkg-deb / apt-get on the host")
    name = f"moat-e2e-hello-{uuid.uuid4().hex[:8]}"
    pkg = ws / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "usr/bin").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text(
        f"Package: {name}\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@t>\n"
        "Description: moat e2e\n")
    exe = pkg / "usr/bin" / name
    exe.write_text("#!/bin/sh\necho hello-from-deb\n")
    exe.chmod(0o755)
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(ws / "hello.deb")],
                   check=True, capture_output=True)
    status = sha("/var/lib/dpkg/status")
    r = users(run, f"apt-get install -y ./hello.deb >/dev/null 2>&1; {name}; "
                   f"dpkg-query -W -f='${{Status}}\\n' {name}", root=True, timeout=120)
    assert "hello-from-deb" in r.stdout, r.stdout + r.stderr
    assert "install ok installed" in r.stdout
    assert not os.path.lexists(f"/usr/bin/{name}")
    assert sha("/var/lib/dpkg/status") == status
    r = subprocess.run(["dpkg-query", "-W", name], capture_output=True)
    assert r.returncode != 0


def test_root_cannot_read_debconf_passwords(run):
    p = Path("/var/cache/debconf/passwords.dat")
    if not IS_ROOT or not p.exists() or p.stat().st_size == 0:
        pytest.skip("needs root and a non-empty passwords.dat")
    r = users(run, f"wc -c < {p}", root=True)
    assert r.stdout.strip() == "0", r.stdout + r.stderr


def test_rootless_without_subordinate_ids_fails_clearly(base):
    """Root pass: `nobody` has no /etc/subuid range: exit 125 naming it."""
    if not IS_ROOT or not shutil.which("runuser"):
        pytest.skip("needs root to run moat as another user")
    import pwd
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")
    if any(l.split(":")[0] in ("nobody", str(nobody.pw_uid))
           for l in Path("/etc/subuid").read_text().splitlines()):
        pytest.skip("nobody has a subordinate range here")
    w = base / "nobody-ws"
    w.mkdir()
    os.chmod(w, 0o777)
    r = subprocess.run(["runuser", "-u", "nobody", "--", "env", f"HOME={w}", MOAT, "run",
                        "-w", str(w), "--users", "--", "/bin/true"],
                       capture_output=True, text=True, timeout=30, cwd=str(w))
    assert r.returncode == 125, r.stdout + r.stderr
    assert "/etc/subuid" in r.stderr and "newuidmap" in r.stderr


def test_root_cannot_plant_a_file_capability_in_the_workspace(run, ws):
    """A security.capability xattr written by root inside, in the workspace
    (id-mapped to its host owner), would be stored with the host owner's
    root id: a real capability on the host. Root has no SETFCAP."""
    script = ("cp /bin/cat tool && chown 1000:1000 tool && python3 -c "
              "'import os,struct; os.setxattr(\"tool\", \"security.capability\", "
              "struct.pack(\"<IIIIII\", 0x03000001, 0x86, 0, 0, 0, 1000))' "
              "&& echo PLANTED")
    r = users(run, script, root=True)
    assert "PLANTED" not in r.stdout, r.stdout + r.stderr
    tool = Path(ws) / "tool"
    if tool.exists():
        assert "security.capability" not in os.listxattr(tool), os.listxattr(tool)
