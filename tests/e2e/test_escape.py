"""Escape attempts against `moat run`.

Every test does something a hostile command would do and then checks the
HOST: the file is absent or unchanged, the secret is not in the output,
the host process is alive, the listener saw no connection. A command
merely failing is never enough. Where the sandbox has to actually run for
an attempt to mean anything, the test also checks that it did (a marker
printed after the attempt, a control file written into the workspace).

Tests that fail because moat itself is wrong are marked xfail(strict=True)
with the reason "moat bug: ..."; they start passing (and then fail the
suite, being strict) once moat is fixed.
"""
import ctypes
import errno
import re
import json
import os
import signal
import socket
import stat
import subprocess
import textwrap
import time

import pytest

from conftest import (HIDDEN_IN_HOME, IS_ROOT, MANDATORY_DENY, MOAT, PY, SH,
                      alive, diff_snap, force_rmtree, host_lexists, moat_cgroup_dirs,
                      moat_env, pids_with, proc_status, real_home, run_in_pty, Runner,
                      sha, sleep_marker, sleep_started, snapshot, uid_tag, wait_until)

needs_root = pytest.mark.skipif(not IS_ROOT, reason="only meaningful when moat runs as root")
needs_user = pytest.mark.skipif(IS_ROOT, reason="only meaningful for an unprivileged caller")


def out_of(r):
    return (r.stdout or "") + (r.stderr or "")


def py(code):
    return textwrap.dedent(code)


# ============================================================================
# Reading secrets
# ============================================================================

@pytest.mark.parametrize("variant", ["default", "allow-read-home"])
def test_read_planted_ssh_key_in_real_home(run, real_home_secret, variant):
    path, tok = real_home_secret
    home = real_home()
    opts = ["--allow-read", home] if variant == "allow-read-home" else []
    before = sha(path)
    r = run.sh(f'cat "{path}"; cat ~/.ssh/*; ls -la ~/.ssh; '
               f'grep -r MOAT-E2E "{home}/.ssh" 2>&1 | head; echo DONE', *opts)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert tok not in out_of(r)
    assert "MOAT-E2E" not in out_of(r)
    assert sha(path) == before


@pytest.mark.parametrize("name", HIDDEN_IN_HOME)
def test_hidden_secret_in_caller_home_with_home_allowed(run, fake_home, name):
    """The caller's home is shown (--allow-read ~), every secret path in it
    stays hidden: world-readable files, so only the mask protects them."""
    home, secrets = fake_home
    path, tok = secrets[name]
    r = run.py(py(f"""
        import os
        p = {str(path)!r}
        try:
            print("SIZE", os.stat(p).st_size)
            print(open(p).read())
        except OSError as e:
            print("ERR", e.errno)
        for root, dirs, files in os.walk({str(home)!r}):
            for f in files:
                try: print(open(os.path.join(root, f)).read())
                except OSError: pass
        print("DONE")
    """), "--allow-read", home, env=moat_env({"HOME": str(home)}))
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert tok not in out_of(r)
    assert "FAKEHOME-SECRET" not in out_of(r)


@pytest.mark.parametrize("mode", [
    "default",
    "read-only",
])
def test_other_users_home_secret(run, mode):
    """/home/*/.aws is hidden for every user, e.g. the test user's."""
    home = "/home/moate2e"
    if not os.path.isdir(home) or not os.access(home, os.W_OK | os.X_OK):
        pytest.skip("needs the moate2e test user's home (run.sh creates it)")
    aws = os.path.join(home, ".aws")
    created = not os.path.lexists(aws)
    if created:
        os.mkdir(aws, 0o755)
        os.chmod(aws, 0o755)
    elif not os.access(aws, os.W_OK | os.X_OK) or os.stat(aws).st_mode & 0o005 != 0o005:
        pytest.skip(f"{aws} exists and is not usable for this test")
    tok = f"AKIA-MOAT-E2E-{uid_tag()}"
    f = os.path.join(aws, f"credentials-{uid_tag()}")
    with open(f, "w") as fh:
        fh.write(tok + "\n")
    os.chmod(f, 0o644)
    try:
        opts = ["--mode", "read-only"] if mode == "read-only" else ["--allow-read", "/home"]
        r = run.sh(f'cat "{f}"; cat {aws}/*; stat -c "%s %a" {aws}; echo DONE', *opts)
        assert "DONE" in r.stdout, r.stderr
        assert tok not in out_of(r)
        # the mask itself (an empty mode-000 directory), or not there at
        # all when the caller's own home is replaced by the private one
        assert "0 0\n" in r.stdout or "No such file" in r.stderr, r.stderr
    finally:
        os.unlink(f)
        if created:
            os.rmdir(aws)


@pytest.mark.parametrize("mode", [
    "default", "allow-read-etc",
    "read-only",
])
def test_etc_shadow_masked(run, mode):
    opts = {"default": [], "allow-read-etc": ["--allow-read", "/etc"],
            "read-only": ["--mode", "read-only"]}[mode]
    r = run.sh('stat -c "SIZE %s MODE %a" /etc/shadow; cat /etc/shadow; '
               'cat /etc/gshadow; echo DONE', *opts)
    assert "DONE" in r.stdout, r.stderr
    if IS_ROOT:
        with open("/etc/shadow") as f:
            for line in f:
                fields = line.split(":")
                if len(fields) > 1 and len(fields[1]) > 3:
                    assert fields[1] not in out_of(r)
                assert line.strip() not in r.stdout
    assert "root:" not in r.stdout
    # hidden by moat's mask (empty, mode 000), not merely by permissions
    assert "SIZE 0 MODE 0" in r.stdout


@needs_root
def test_read_root_directory(run):
    tok = f"ROOT-PLANT-{uid_tag()}"
    p = f"/root/moat-e2e-{uid_tag()}.txt"
    with open(p, "w") as f:
        f.write(tok + "\n")
    os.chmod(p, 0o644)
    try:
        r = run.sh(f'cat {p}; cat /root/*; echo LS; ls -la /root; echo DONE')
        assert "DONE" in r.stdout, r.stderr
        assert tok not in out_of(r)
        assert os.path.basename(p) not in r.stdout.split("LS", 1)[1]
        with open(p) as f:
            assert f.read() == tok + "\n"
    finally:
        os.unlink(p)


def test_host_tmp_invisible(run):
    tok = f"HOST-TMP-{uid_tag()}"
    p = f"/tmp/moat-e2e-host-{uid_tag()}"
    with open(p, "w") as f:
        f.write(tok + "\n")
    os.chmod(p, 0o644)
    try:
        r = run.sh(f'cat {p}; cat /tmp/moat-e2e-host-*; echo LS; ls -la /tmp; echo DONE')
        assert "DONE" in r.stdout, r.stderr
        assert tok not in out_of(r)
        assert os.path.basename(p) not in r.stdout.split("LS", 1)[1]
        with open(p) as f:
            assert f.read() == tok + "\n"
    finally:
        os.unlink(p)


def test_host_dev_shm_invisible(run):
    tok = f"HOST-SHM-{uid_tag()}"
    p = f"/dev/shm/moat-e2e-{uid_tag()}"
    with open(p, "w") as f:
        f.write(tok + "\n")
    os.chmod(p, 0o666)
    try:
        r = run.sh(f'cat {p}; ls -la /dev/shm; echo evil > {p}; echo DONE')
        assert "DONE" in r.stdout, r.stderr
        assert tok not in out_of(r)
        with open(p) as f:
            assert f.read() == tok + "\n"
    finally:
        os.unlink(p)


def test_host_sysv_shm_invisible(run):
    libc = ctypes.CDLL(None, use_errno=True)
    key = 0x6d6f0000 + (os.getpid() & 0xffff)
    shmid = libc.shmget(key, 4096, 0o1000 | 0o2000 | 0o666)  # IPC_CREAT|IPC_EXCL
    if shmid < 0:
        pytest.skip(f"cannot create a SysV segment: errno {ctypes.get_errno()}")
    try:
        r = run.py(py(f"""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            r = libc.shmget({key}, 0, 0)
            print("SHMGET", r, ctypes.get_errno())
        """))
        assert r.returncode == 0, r.stderr
        assert f"SHMGET -1 {errno.ENOENT}" in r.stdout
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID


# ============================================================================
# Writing outside the workspace
# ============================================================================

@pytest.mark.parametrize("where", ["host-tmp", "etc", "home", "ws-parent",
                                   "var-tmp", "usr-local-bin"])
def test_write_outside_workspace(run, base, where):
    name = f"moat-e2e-esc-{uid_tag()}"
    target = {
        "host-tmp": f"/tmp/{name}",
        "etc": f"/etc/{name}",
        "home": os.path.join(real_home(), name),
        "ws-parent": str(base / name),
        "var-tmp": f"/var/tmp/{name}",
        "usr-local-bin": f"/usr/local/bin/{name}",
    }[where]
    rel = f"../{name}" if where == "ws-parent" else target
    created = [target, target + ".d", target + ".t", target + ".l"]
    try:
        r = run.sh(f'echo evil > "{rel}"; echo evil > "{target}"; mkdir "{target}.d"; '
                   f'touch "{target}.t"; ln -s /etc/passwd "{target}.l"; '
                   f'cp /bin/sh "{target}"; echo DONE')
        assert "DONE" in r.stdout, r.stderr
        for p in created:
            assert not os.path.lexists(p), f"sandbox created {p} on the host"
    finally:
        for p in created:
            if os.path.lexists(p):
                force_rmtree(p) if os.path.isdir(p) and not os.path.islink(p) else os.unlink(p)


# ============================================================================
# Mandatory write-deny inside the workspace
# ============================================================================

def attack_script(name, tag):
    """Try every way to write `name` (relative) in the current directory."""
    n = name.rstrip("/")
    if name.endswith("/"):
        return f"""
            D='{n}'
            mkdir -p "$D"; echo evil-{tag} > "$D/evil"
            chmod 777 "$D"
            rm -rf "$D"; mkdir -p "$D" && echo evil-{tag} > "$D/evil"
            mkdir -p /tmp/evildir && echo evil-{tag} > /tmp/evildir/evil
            mv -T /tmp/evildir "$D"
            mkdir -p evildir2 && echo evil-{tag} > evildir2/evil && mv -T evildir2 "$D"
            rm -rf evildir2
            ln -s /tmp "$D"
            echo ok > ok-control
            echo ATTACK-DONE
        """
    return f"""
        N='{n}'
        echo evil-{tag} > /tmp/evil_src
        echo evil-{tag} >> "$N"
        echo evil-{tag} > "$N"
        printf "" > "$N"
        chmod 666 "$N"
        rm -f "$N"; echo evil-{tag} > "$N"
        mv -f /tmp/evil_src "$N"
        echo evil-{tag} > evil2 && mv -f evil2 "$N"; rm -f evil2
        ln -sf /tmp/evil_src "$N"
        mkdir -p "$(dirname "$N")" && echo evil-{tag} > "$N"
        echo ok > ok-control
        echo ATTACK-DONE
    """


def plant_existing(ws, name, tag):
    n = name.rstrip("/")
    p = ws / n
    p.parent.mkdir(parents=True, exist_ok=True)
    if name.endswith("/"):
        p.mkdir(parents=True, exist_ok=True)
        (p / "keep.txt").write_text(f"original-{tag}\n")
    else:
        p.write_text(f"original-{tag}\n")


def check_attack(run, ws, name, opts=()):
    tag = uid_tag()
    before = snapshot(ws)
    r = run.sh(textwrap.dedent(attack_script(name, tag)), *opts)
    assert r.returncode == 0, r.stderr
    assert "ATTACK-DONE" in r.stdout
    # control: the workspace itself was writable
    ctl = ws / "ok-control"
    assert ctl.is_file(), "the workspace was not writable: the attack proves nothing"
    ctl.unlink()
    after = snapshot(ws)
    assert after == before, "host workspace changed:\n" + diff_snap(before, after)


@pytest.mark.parametrize("name", MANDATORY_DENY)
def test_mandatory_deny_existing(run, ws, name):
    plant_existing(ws, name, uid_tag())
    check_attack(run, ws, name)


@pytest.mark.parametrize("name", MANDATORY_DENY)
def test_mandatory_deny_missing(run, ws, name):
    """Not yet existing: not created, and no placeholder left afterwards."""
    check_attack(run, ws, name)


@needs_root
@pytest.mark.parametrize("existing", [False, True])
@pytest.mark.parametrize("name", [".bashrc", ".git/hooks/", ".git/config", ".vscode/", ".mcp.json"])
def test_mandatory_deny_foreign_workspace(foreign_ws, name, existing):
    """The same in a workspace owned by another user (uid 4242), where the
    sandbox acts as that owner through the id-mapped mount."""
    if existing:
        plant_existing(foreign_ws, name, uid_tag())
        for root, dirs, files in os.walk(foreign_ws):
            for n in dirs + files:
                os.lchown(os.path.join(root, n), 4242, 4242)
    check_attack(Runner(foreign_ws), foreign_ws, name)
    assert os.stat(foreign_ws).st_uid == 4242


@pytest.mark.parametrize("name", [".bashrc", ".git/hooks/", ".vscode/"])
def test_mandatory_deny_in_extra_writable_dir(run, ws, outside, name):
    """--allow-write DIR gets the same protection as the workspace."""
    tag = uid_tag()
    before = snapshot(outside)
    n = name.rstrip("/")
    tgt = f"{outside}/{n}" + ("/evil" if name.endswith("/") else "")
    r = run.sh(f'mkdir -p "{outside}/{n}"; mkdir -p "$(dirname "{tgt}")"; '
               f'echo evil-{tag} > "{tgt}"; echo ok > "{outside}/ok-control"; echo DONE',
               "--allow-write", outside)
    assert "DONE" in r.stdout, r.stderr
    assert (outside / "ok-control").is_file()
    (outside / "ok-control").unlink()
    after = snapshot(outside)
    assert after == before, diff_snap(before, after)


@pytest.mark.parametrize("name,parent,setup", [
    (".git/hooks/pre-commit", ".git", ".git/config"),
    (".git/config", ".git", ".git/config"),
    (".claude/commands/evil.md", ".claude", ".claude/settings.json"),
    (".claude/agents/evil.md", ".claude", ".claude/settings.json"),
])
def test_mandatory_deny_parent_rename(run, ws, name, parent, setup):
    tag = uid_tag()
    (ws / setup).parent.mkdir(parents=True, exist_ok=True)
    (ws / setup).write_text(f"original-{tag}\n")
    before = snapshot(ws)
    r = run.sh(f'mv {parent} {parent}.moved; mkdir -p "$(dirname {name})"; '
               f'echo evil-{tag} > {name}; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    after = snapshot(ws)
    assert not host_lexists(ws / name) or f"evil-{tag}" not in (ws / name).read_text()
    assert after == before, diff_snap(before, after)


# ============================================================================
# Symlink tricks
# ============================================================================

@pytest.mark.parametrize("visible", [False, True])
def test_symlink_to_outside_file(run, ws, outside, visible):
    target = outside / "target.txt"
    target.write_text("original\n")
    os.chmod(target, 0o666)
    (ws / "link").symlink_to(target)
    opts = ["--allow-read", outside] if visible else []
    before = snapshot(outside)
    r = run.sh('echo evil >> link; echo evil > link; cat link; echo DONE', *opts)
    assert "DONE" in r.stdout, r.stderr
    if visible:
        assert "original" in r.stdout  # readable, as allowed
    assert target.read_text() == "original\n"
    assert snapshot(outside) == before


def test_symlink_into_hidden_path(run, ws, fake_home, real_home_secret):
    home, secrets = fake_home
    path, tok = secrets[".ssh"]
    rpath, rtok = real_home_secret
    (ws / "k1").symlink_to(path)
    (ws / "k2").symlink_to(home / ".ssh")
    (ws / "k3").symlink_to(rpath)
    r = run.sh('cat k1; ls -la k2/; cat k2/*; cat k3; echo DONE',
               "--allow-read", home, env=moat_env({"HOME": str(home)}))
    assert "DONE" in r.stdout, r.stderr
    assert tok not in out_of(r)
    assert rtok not in out_of(r)


@pytest.mark.parametrize("name", [".bashrc", ".gitconfig", ".mcp.json"])
def test_symlinked_protected_file_target_unchanged(run, ws, outside, name):
    """ws/.bashrc -> a file in another writable dir: the link is not
    followed for writing, and neither the link nor its target change."""
    target = outside / "real_rc"
    target.write_text("original\n")
    (ws / name).symlink_to(target)
    before_ws, before_out = snapshot(ws), snapshot(outside)
    r = run.sh(f'echo evil >> {name}; echo evil > {name}; rm -f {name}; '
               f'ln -sf /tmp/x {name}; echo evil > {name}; '
               f'echo fine > "{outside}/control"; echo DONE', "--allow-write", outside)
    assert "DONE" in r.stdout, r.stderr
    assert (outside / "control").read_text() == "fine\n"  # target dir was writable
    (outside / "control").unlink()
    assert target.read_text() == "original\n"
    assert os.readlink(ws / name) == str(target)
    assert snapshot(ws) == before_ws
    assert snapshot(outside) == before_out, diff_snap(before_out, snapshot(outside))


def test_symlinked_git_dir(run, ws, outside):
    gitdir = outside / "gitdir"
    (gitdir / "hooks").mkdir(parents=True)
    (gitdir / "config").write_text("original\n")
    (ws / ".git").symlink_to(gitdir)
    before = snapshot(outside)
    r = run.sh('echo evil > .git/hooks/pre-commit; echo evil >> .git/config; '
               'rm -f .git; mkdir -p .git/hooks && echo evil > .git/hooks/pre-commit; echo DONE',
               "--allow-write", outside)
    assert "DONE" in r.stdout, r.stderr
    assert not (gitdir / "hooks" / "pre-commit").exists()
    assert (gitdir / "config").read_text() == "original\n"
    assert os.readlink(ws / ".git") == str(gitdir)
    assert snapshot(outside) == before


# ============================================================================
# Hard-link tricks
# ============================================================================

def test_hardlink_etc_passwd(run, ws):
    before = sha("/etc/passwd")
    ino = os.stat("/etc/passwd").st_ino
    r = run.sh('ln /etc/passwd pw; echo "evil::0:0::/:/bin/sh" >> pw; '
               'echo "evil::0:0::/:/bin/sh" >> /etc/passwd; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    assert sha("/etc/passwd") == before
    if (ws / "pw").exists():
        assert os.stat(ws / "pw").st_ino != ino


def test_hardlink_allow_read_file(run, ws, outside):
    """A file shown read-only must not become writable through a hard link
    in the writable workspace (even when its permissions would allow it)."""
    f = outside / "shared.txt"
    f.write_text("original\n")
    os.chmod(f, 0o666)
    r = run.sh(f'ln "{f}" lnk; echo evil >> lnk; echo evil >> "{f}"; echo DONE',
               "--allow-read", outside)
    assert "DONE" in r.stdout, r.stderr
    assert f.read_text() == "original\n"
    assert os.stat(f).st_nlink == 1


def test_hardlink_protected_file(run, ws):
    (ws / ".bashrc").write_text("original\n")
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("original\n")
    before = snapshot(ws)
    r = run.sh('ln .bashrc b; echo evil >> b; ln .git/config c; echo evil >> c; '
               'rm -f b c; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    assert (ws / ".bashrc").read_text() == "original\n"
    assert (ws / ".git" / "config").read_text() == "original\n"
    assert snapshot(ws) == before


# ============================================================================
# /proc and /sys
# ============================================================================

def _read(p):
    with open(p) as f:
        return f.read()


@pytest.mark.parametrize("target,value", [
    ("/proc/sys/kernel/hostname", "evil-moat-e2e"),
    ("/proc/sys/kernel/core_pattern", "|/tmp/evil-moat-e2e %p"),
    ("/proc/sysrq-trigger", "h"),
])
def test_proc_write(run, target, value):
    if not os.path.exists(target):
        pytest.skip(f"{target} does not exist on this kernel")
    before = _read(target) if os.access(target, os.R_OK) else None
    r = run.py(py(f"""
        import socket, ctypes
        try:
            with open({target!r}, "w") as f: f.write({value!r})
            print("WROTE")
        except OSError as e:
            print("ERR", e.errno)
        libc = ctypes.CDLL(None, use_errno=True)
        print("sethostname", libc.sethostname(b"evil-moat-e2e", 13), ctypes.get_errno())
        print("HOSTNAME", socket.gethostname())
    """))
    assert r.returncode == 0, r.stderr
    assert "WROTE" not in r.stdout
    assert "HOSTNAME moat" in r.stdout
    if before is not None:
        assert _read(target) == before
    assert "evil" not in _read("/proc/sys/kernel/hostname")
    assert "evil" not in _read("/proc/sys/kernel/core_pattern")


def test_no_sys(run):
    target = next((p for p in ("/sys/kernel/mm/ksm/run",
                               "/sys/kernel/mm/transparent_hugepage/enabled")
                   if os.path.exists(p)), None)
    before = _read(target) if target else None
    val = "1" if target and target.endswith("ksm/run") else "always"
    r = run.sh(f'ls /sys; echo {val} > {target or "/sys/kernel/x"}; '
               'mkdir -p /sys/fs/cgroup; echo $$ > /sys/fs/cgroup/cgroup.procs; '
               'test -e /sys && echo SYS-EXISTS; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    assert "SYS-EXISTS" not in r.stdout
    if target:
        assert _read(target) == before


def test_proc_kernel_info(run):
    """No kernel addresses, no host timers, no other users' keys: whether
    by a mask or by the kernel's own checks, the content must not be there."""
    r = run.py(py("""
        import json, os
        res = {}
        try:
            lines = open("/proc/kallsyms").read().splitlines()
            res["kallsyms_nonzero"] = sum(1 for l in lines if l.split()[0].strip("0"))
        except OSError as e:
            res["kallsyms_nonzero"] = 0
        for name in ("kcore", "timer_list", "sched_debug", "kmsg"):
            try:
                with open("/proc/" + name, "rb") as f:
                    res[name] = len(f.read(4096))
            except OSError as e:
                res[name] = 0
        try:
            keys = open("/proc/keys").read().splitlines()
        except OSError:
            keys = []
        res["foreign_keys"] = [k for k in keys if int(k.split()[5]) != os.getuid()]
        print(json.dumps(res))
    """))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res == {"kallsyms_nonzero": 0, "kcore": 0, "timer_list": 0,
                   "sched_debug": 0, "kmsg": 0, "foreign_keys": []}, res


# ============================================================================
# Devices
# ============================================================================

def test_mknod_fails(run, ws):
    before = snapshot(ws)
    r = run.py(py("""
        import os, stat
        for p in ("devnull", "/tmp/devnull", "/dev/evil", "disk"):
            for mode, dev in ((stat.S_IFCHR, os.makedev(1, 3)),
                              (stat.S_IFBLK, os.makedev(254, 0))):
                try:
                    os.mknod(p, mode | 0o666, dev)
                    print("CREATED", p)
                except OSError as e:
                    print("ERR", p, e.errno)
        print("DONE")
    """))
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert "CREATED" not in r.stdout
    assert snapshot(ws) == before
    assert not os.path.lexists("/dev/evil")


def test_dev_is_minimal(run):
    allowed = {"null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx",
               "shm", "fd", "stdin", "stdout", "stderr"}
    r = run.py(py("""
        import os, json
        res = {"dev": sorted(os.listdir("/dev")), "pts": sorted(os.listdir("/dev/pts"))}
        for p in ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/kvm", "/dev/mem",
                  "/dev/kmsg", "/dev/loop0", "/dev/fuse", "/dev/console"):
            try:
                os.close(os.open(p, os.O_RDONLY)); res[p] = "OPENED"
            except OSError as e:
                res[p] = e.errno
        print(json.dumps(res))
    """))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert set(res["dev"]) <= allowed, res["dev"]
    assert res["pts"] == ["ptmx"], res["pts"]  # a new devpts instance
    for k, v in res.items():
        if k.startswith("/dev/"):
            assert v == errno.ENOENT, (k, v)


# ============================================================================
# Mounts
# ============================================================================

def test_mount_tmpfs(run, ws):
    (ws / "mnt").mkdir()
    r = run.py(py(f"""
        import ctypes, os, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        before = len(open("/proc/self/mountinfo").readlines())
        subprocess.run(["/usr/bin/mount", "-t", "tmpfs", "none", "mnt"])  # setuid root on the host
        r = libc.mount(b"none", b"mnt", b"tmpfs", 0, None)
        print("MOUNT", r, ctypes.get_errno())
        r = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
        print("MOUNT2", r, ctypes.get_errno())
        open("mnt/probe", "w").write("x")
        points = [l.split()[4] for l in open("/proc/self/mountinfo")]
        print("MOUNTED", {str(ws)!r} + "/mnt" in points or len(points) != before)
    """))
    assert r.returncode == 0, r.stderr
    assert f"MOUNT -1 {errno.EPERM}" in r.stdout
    assert f"MOUNT2 -1 {errno.EPERM}" in r.stdout
    assert "MOUNTED False" in r.stdout
    # the probe went to the real directory, not to a private tmpfs
    assert (ws / "mnt" / "probe").read_text() == "x"
    with open("/proc/self/mountinfo") as f:
        assert f"{ws}/mnt" not in f.read()


def test_umount_proc_and_masks(run, ws):
    (ws / ".bashrc").write_text("original\n")
    r = run.py(py("""
        import ctypes, os, subprocess
        libc = ctypes.CDLL(None, use_errno=True)
        subprocess.run(["/usr/bin/umount", "/proc"])
        subprocess.run(["/usr/bin/umount", "-l", "/etc/shadow"])
        for p in (b"/proc", b"/etc/shadow", b".bashrc", b"/dev", b"/"):
            r = libc.umount2(p, 2)  # MNT_DETACH
            print("UMOUNT", p.decode(), r, ctypes.get_errno())
        print("SHADOW", os.stat("/etc/shadow").st_size)
        print("PROC", os.path.exists("/proc/self/status"))
        try:
            open(".bashrc", "a").write("evil\\n")
        except OSError as e:
            print("BASHRC", e.errno)
    """))
    assert r.returncode == 0, r.stderr
    for p in ("/proc", "/etc/shadow", ".bashrc", "/dev", "/"):
        assert f"UMOUNT {p} -1 {errno.EPERM}" in r.stdout
    assert "SHADOW 0" in r.stdout
    assert "PROC True" in r.stdout
    assert (ws / ".bashrc").read_text() == "original\n"


# ============================================================================
# Nested namespaces
# ============================================================================

@pytest.mark.parametrize("flags", ["-U", "-r", "-n", "-m", "-p -f", "-i", "-u", "-C"])
def test_unshare_tool(run, flags):
    tag = uid_tag()
    r = run.sh(f'unshare {flags} echo NESTED-{tag}; echo RC=$?')
    assert f"NESTED-{tag}" not in r.stdout
    assert "RC=0" not in r.stdout
    assert "RC=" in r.stdout, r.stderr


NS_FLAGS = {"NEWUSER": 0x10000000, "NEWNS": 0x00020000, "NEWNET": 0x40000000,
            "NEWPID": 0x20000000, "NEWIPC": 0x08000000, "NEWUTS": 0x04000000,
            "NEWCGROUP": 0x02000000}


@pytest.mark.parametrize("flag", list(NS_FLAGS))
def test_unshare_and_clone_syscalls(run, flag):
    r = run.py(py(f"""
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        ctypes.set_errno(0)
        print("UNSHARE", libc.unshare({NS_FLAGS[flag]}), ctypes.get_errno())
        ctypes.set_errno(0)
        r = libc.syscall(56, ctypes.c_long({NS_FLAGS[flag]} | 17), 0, 0, 0, 0)
        if r == 0:
            os._exit(0)
        print("CLONE", r, ctypes.get_errno())
        args = (ctypes.c_uint64 * 11)()
        args[0] = {NS_FLAGS[flag]}; args[4] = 17
        ctypes.set_errno(0)
        r = libc.syscall(435, ctypes.byref(args), ctypes.c_long(88))
        if r == 0:
            os._exit(0)
        print("CLONE3", r, ctypes.get_errno())
        print("NS", os.readlink("/proc/self/ns/user"))
    """))
    assert r.returncode == 0, r.stderr
    assert f"UNSHARE -1 {errno.EPERM}" in r.stdout
    assert f"CLONE -1 {errno.EPERM}" in r.stdout
    assert f"CLONE3 -1 {errno.ENOSYS}" in r.stdout


# ============================================================================
# Refused system calls (x86_64 numbers). Arguments are chosen so that the
# kernel itself would answer something other than EPERM where it can (bad
# fd, bad address, bad flags), so EPERM means the seccomp filter answered.
# ============================================================================

SYSCALLS = {
    "keyctl": (250, 0, -1, 0),
    "add_key": (248, 0, 0, 0, 0, 0),
    "request_key": (249, 0, 0, 0, 0),
    "bpf": (321, 9999, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "userfaultfd": (323, 1 | 0x100),
    "io_uring_setup": (425, 0, 0),
    "io_uring_enter": (426, -1, 0, 0, 0, 0, 0),
    "io_uring_register": (427, -1, 0, 0, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "kexec_file_load": (320, -1, -1, 0, 0, 0),
    "init_module": (175, 0, 0, 0),
    "finit_module": (313, -1, 0, 0),
    "delete_module": (176, 0, 0),
    "reboot": (169, 0, 0, 0, 0),
    "swapon": (167, 0, 0),
    "swapoff": (168, 0),
    "acct": (163, 0),
    "quotactl": (179, 0xff, 0, 0, 0),
    "syslog": (103, 10, 0, 0),
    "iopl": (172, 0),
    "ioperm": (173, 0, 0, 0),
    "mount": (165, 0, "/", 0, 1 << 31, 0),
    "umount2": (166, "/", 0x80000000),
    "fsopen": (430, 0, 0xffff),
    "fsconfig": (431, -1, 0, 0, 0, 0),
    "fsmount": (432, -1, 0, 0),
    "fspick": (433, -1, 0, 0xffff),
    "move_mount": (429, -1, 0, -1, 0, 0xffff),
    "open_tree": (428, -100, "/", 0),
    "mount_setattr": (442, -1, 0, 0xffff, 0, 0),
    "pivot_root": (155, 0, 0),
    "chroot": (161, "/nonexistent-moat-e2e"),
    "setns": (308, -1, 0),
    "unshare": (272, 0),
    "open_by_handle_at": (304, -1, 0, 0),
    "name_to_handle_at": (303, -100, "/", 0, 0, 0),
    "clone_newuser": (56, 0x10000000 | 17, 0, 0, 0, 0),
    "x32_getpid": (0x40000000 + 39,),
}

SYSCALL_PROBE = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.syscall.argtypes = [ctypes.c_long] * 7
keep = []
def arg(a):
    if isinstance(a, str):
        b = ctypes.c_char_p(a.encode()); keep.append(b)
        return ctypes.cast(b, ctypes.c_void_p).value
    return a
res = {}
for name, spec in json.loads(sys.argv[1]).items():
    nr, *args = spec
    args = [arg(a) for a in args] + [0] * (6 - len(args))
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    if r == 0 and name.startswith("clone"):
        os._exit(0)
    res[name] = [r, ctypes.get_errno()]
print(json.dumps(res))
"""


@pytest.fixture(scope="module")
def syscall_results(moat):
    d = f"/tmp/moat-e2e-sys-{uid_tag()}"
    os.mkdir(d, 0o755)
    try:
        r = Runner(d)(["-w", d, "--", PY, "-c", SYSCALL_PROBE, json.dumps(SYSCALLS)])
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    finally:
        force_rmtree(d)


@pytest.mark.parametrize("name", list(SYSCALLS))
def test_refused_syscall(syscall_results, name):
    ret, err = syscall_results[name]
    assert (ret, err) == (-1, errno.EPERM), f"{name}: returned {ret}, errno {err}"


def test_clone3_enosys(run):
    r = run.py(py("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        args = (ctypes.c_uint64 * 11)()
        args[4] = 17
        r = libc.syscall(435, ctypes.byref(args), ctypes.c_long(88))
        if r == 0:
            import os; os._exit(0)
        print("CLONE3", r, ctypes.get_errno())
        import os
        pid = os.fork()   # glibc falls back to clone(2)
        if pid == 0:
            os._exit(3)
        print("FORK", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """))
    assert r.returncode == 0, r.stderr
    assert f"CLONE3 -1 {errno.ENOSYS}" in r.stdout
    assert "FORK 3" in r.stdout


INT80 = """
import ctypes, mmap
code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])  # mov eax,20 (i386 getpid); int 0x80; ret
m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))
print("INT80", f(), flush=True)
"""


def test_i386_int80_refused(run):
    # Harmless on the host: an i386 getpid.
    host = subprocess.run([PY, "-c", INT80], capture_output=True, text=True)
    if host.returncode != 0:
        pytest.skip("this kernel has no i386 emulation (int 0x80 faults on the host too)")
    r = run.py(INT80)
    assert r.returncode == 0, r.stderr
    assert "INT80 -1" in r.stdout


# ============================================================================
# Other processes: the host's and the supervisor
# ============================================================================

def test_kill_and_trace_host_process(run, host_sleep):
    hp = host_sleep.pid
    r = run.py(py(f"""
        import ctypes, os, signal
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        def t(name, f):
            try:
                print(name, f())
            except OSError as e:
                print(name, "ERR", e.errno)
        t("kill9", lambda: os.kill({hp}, signal.SIGKILL))
        t("kill0", lambda: os.kill({hp}, 0))
        t("pgkill", lambda: os.killpg({hp}, signal.SIGKILL))
        t("proc", lambda: open("/proc/{hp}/status").read()[:20])
        ctypes.set_errno(0)
        print("pidfd", libc.syscall(434, {hp}, 0), ctypes.get_errno())
        ctypes.set_errno(0)
        print("ptrace", libc.ptrace(16, {hp}, 0, 0), ctypes.get_errno())
        child = os.fork()
        if child == 0:
            os.execvp("sleep", ["sleep", "60"])
        os.kill(-1, signal.SIGKILL)   # everything this process may signal
        print("CHILD", os.waitpid(child, 0)[1] & 0x7f)
        print("DONE", flush=True)
    """))
    assert "DONE" in r.stdout, r.stderr
    assert r.returncode == 0, r.stderr
    assert "CHILD 9" in r.stdout  # kill(-1) did reach what it could reach
    time.sleep(0.2)
    assert host_sleep.poll() is None, "the host process was killed"
    assert alive(hp)
    assert proc_status(hp).get("TracerPid") == "0"


def test_kill_moat_itself(run):
    """The sandbox cannot signal moat (its parent on the host)."""
    r = run.py(py("""
        import os, signal
        # moat is outside our pid namespace: nothing to see, nothing to kill
        ppid = os.getppid()
        print("PPID", ppid)
        for pid in range(2, 4096):
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, signal.SIGKILL)
                print("KILLED", pid)
            except OSError:
                pass
        print("DONE")
    """))
    assert r.returncode == 0, r.stderr
    assert "PPID 1" in r.stdout
    assert "KILLED" not in r.stdout
    assert "DONE" in r.stdout


def test_supervisor_not_traceable(run):
    r = run.py(py("""
        import ctypes, os, json
        libc = ctypes.CDLL(None, use_errno=True)
        res = {}
        def t(name, f):
            try:
                f(); res[name] = "OK"
            except OSError as e:
                res[name] = e.errno
        t("mem", lambda: open("/proc/1/mem", "rb").read(1))
        t("environ", lambda: open("/proc/1/environ", "rb").read())
        t("exe", lambda: os.readlink("/proc/1/exe"))
        t("root", lambda: os.listdir("/proc/1/root/"))
        t("cwd", lambda: os.listdir("/proc/1/cwd/"))
        t("fd", lambda: os.listdir("/proc/1/fd"))
        t("maps", lambda: open("/proc/1/maps").read())
        ctypes.set_errno(0)
        res["ptrace_attach"] = [libc.ptrace(16, 1, 0, 0), ctypes.get_errno()]
        ctypes.set_errno(0)
        res["ptrace_seize"] = [libc.ptrace(0x4206, 1, 0, 0), ctypes.get_errno()]
        buf = ctypes.create_string_buffer(8)
        class iov(ctypes.Structure):
            _fields_ = [("b", ctypes.c_void_p), ("l", ctypes.c_size_t)]
        a = iov(ctypes.cast(buf, ctypes.c_void_p), 8); b = iov(0x400000, 8)
        ctypes.set_errno(0)
        res["vm_readv"] = [libc.process_vm_readv(1, ctypes.byref(a), 1, ctypes.byref(b), 1, 0), ctypes.get_errno()]
        print(json.dumps(res))
    """))
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for k in ("mem", "environ", "exe", "root", "cwd", "fd", "maps"):
        assert res[k] in (errno.EACCES, errno.EPERM), (k, res[k])
    for k in ("ptrace_attach", "ptrace_seize", "vm_readv"):
        assert res[k] == [-1, errno.EPERM], (k, res[k])


def test_inherited_fd_closed(run, outside):
    """A directory fd moat inherits must not reach the command."""
    fd = os.open(outside, os.O_RDONLY | os.O_DIRECTORY)
    try:
        r = run.py(py(f"""
            import os
            fds = sorted(int(x) for x in os.listdir("/proc/self/fd"))
            print("FDS", fds)
            for how in ("dirfd", "proc"):
                try:
                    if how == "dirfd":
                        os.close(os.open("escape-" + how, os.O_CREAT | os.O_WRONLY, dir_fd={fd}))
                    else:
                        open("/proc/self/fd/{fd}/escape-" + how, "w").write("x")
                    print("ESCAPED", how)
                except OSError as e:
                    print("ERR", how, e.errno)
            try:
                print("LIST", os.listdir("/proc/1/fd"))
            except OSError as e:
                print("ERR pid1", e.errno)
        """), pass_fds=(fd,))
        assert r.returncode == 0, r.stderr
        assert "ESCAPED" not in r.stdout
        assert "LIST" not in r.stdout
        fds = eval(r.stdout.split("FDS ", 1)[1].splitlines()[0])
        assert fd not in fds
        assert os.listdir(outside) == []
    finally:
        os.close(fd)


# ============================================================================
# Unix sockets of the host
# ============================================================================

CONNECT_UNIX = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1].replace("@", "\\0", 1) if sys.argv[1].startswith("@") else sys.argv[1])
    s.sendall(b"hello from the sandbox")
    print("CONNECTED")
except OSError as e:
    print("ERR", e.errno)
"""


def _accepts(srv, wait=0.3):
    srv.settimeout(wait)
    try:
        c, _ = srv.accept()
        c.close()
        return True
    except (socket.timeout, BlockingIOError):
        return False


@pytest.mark.parametrize("net", ["none", "host"])
def test_host_abstract_socket(run, ws, net):
    name = f"moat-e2e-abs-{uid_tag()}"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind("\0" + name)
    srv.listen(4)
    try:
        r = run(["-w", ws, "--net", net, "--", PY, "-c", CONNECT_UNIX, "@" + name])
        assert r.returncode == 0, r.stderr
        assert "ERR" in r.stdout
        assert "CONNECTED" not in r.stdout
        assert not _accepts(srv)
    finally:
        srv.close()


def test_host_path_socket_in_tmp(run, ws):
    path = f"/tmp/moat-e2e-{uid_tag()}.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(4)
    (ws / "sock").symlink_to(path)
    try:
        for target in (path, "sock"):
            r = run(["-w", ws, "--", PY, "-c", CONNECT_UNIX, target])
            assert r.returncode == 0, r.stderr
            assert "ERR" in r.stdout
            assert "CONNECTED" not in r.stdout
        assert not _accepts(srv)
    finally:
        srv.close()
        os.unlink(path)


# ============================================================================
# Network
# ============================================================================

def test_tcp_to_host_loopback(run):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    try:
        r = run.py(py(f"""
            import socket
            for addr in (("127.0.0.1", {port}), ("127.0.0.2", {port})):
                s = socket.socket(); s.settimeout(3)
                try:
                    s.connect(addr); s.sendall(b"x"); print("CONNECTED", addr)
                except OSError as e:
                    print("ERR", e.errno)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", {port})); s.listen(1); print("LISTENING")
            except OSError as e:
                print("BIND", e.errno)
        """))
        assert r.returncode == 0, r.stderr
        assert "CONNECTED" not in r.stdout
        assert "LISTENING" not in r.stdout
        assert not _accepts(srv)
    finally:
        srv.close()


def test_tcp_to_outside_address(run):
    """TEST-NET-1 (RFC 5737): never routed. Must fail at once: no route out
    of the sandbox's network namespace (moat's Landlock rule answers first,
    with EACCES)."""
    r = run.py(py("""
        import socket, time
        s = socket.socket(); s.settimeout(10)
        t = time.monotonic()
        try:
            s.connect(("192.0.2.1", 80)); print("CONNECTED")
        except OSError as e:
            print("ERR", e.errno, round(time.monotonic() - t, 3))
    """))
    assert r.returncode == 0, r.stderr
    assert "CONNECTED" not in r.stdout
    _, err, took = r.stdout.split()
    assert int(err) in (errno.ENETUNREACH, errno.EACCES)
    assert float(took) < 1.0


def test_udp_to_outside_address_unreachable(run):
    """UDP is outside Landlock's TCP rules: here only the empty network
    namespace stands, and it must have no route at all."""
    r = run.py(py("""
        import socket
        for fam, addr in ((socket.AF_INET, ("192.0.2.1", 53)),
                          (socket.AF_INET6, ("2001:db8::1", 53))):
            s = socket.socket(fam, socket.SOCK_DGRAM)
            try:
                s.connect(addr); s.send(b"x"); print("SENT")
            except OSError as e:
                print("ERR", e.errno)
    """))
    assert r.returncode == 0, r.stderr
    assert "SENT" not in r.stdout
    errs = [int(l.split()[1]) for l in r.stdout.splitlines() if l.startswith("ERR")]
    assert len(errs) == 2
    assert all(e in (errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) for e in errs)
    assert errs[0] == errno.ENETUNREACH


def test_only_loopback_interface(run):
    with open("/proc/net/dev") as f:
        host_ifs = {l.split(":")[0].strip() for l in f.readlines()[2:]}
    r = run.sh('tail -n +3 /proc/net/dev | cut -d: -f1; echo ROUTES; tail -n +2 /proc/net/route')
    assert r.returncode == 0, r.stderr
    ifs_part, routes = r.stdout.split("ROUTES")
    assert [x.strip() for x in ifs_part.split()] == ["lo"]
    assert routes.strip() == ""
    assert host_ifs  # the host view was readable


def test_dns_fails(run):
    r = run.sh('getent hosts example.com; echo RC=$?; '
               f'{PY} -c "import socket; print(socket.getaddrinfo(\'example.com\', 80))"; echo PYRC=$?')
    assert "RC=2" in r.stdout, out_of(r)
    assert "PYRC=1" in r.stdout
    assert "example.com" not in r.stdout.replace("RC=", "")


# ============================================================================
# Terminal injection
# ============================================================================

TIOCSTI_CODE = r"""
import ctypes, fcntl, os, termios
libc = ctypes.CDLL(None, use_errno=True)
try:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0); print("CTTY ok")
except OSError as e:
    print("CTTY", e.errno)
for name, req in (("STI", termios.TIOCSTI), ("STI_HI", termios.TIOCSTI | (1 << 32)),
                  ("LINUX", 0x541C)):
    c = ctypes.create_string_buffer(b"\x0b" if name == "LINUX" else b"X")
    ctypes.set_errno(0)
    r = libc.ioctl(0, ctypes.c_ulong(req), c)
    print(name, r, ctypes.get_errno())
for fd in ("/dev/tty",):
    try:
        f = os.open(fd, os.O_RDWR)
        c = ctypes.create_string_buffer(b"Y")
        ctypes.set_errno(0)
        print("TTYSTI", libc.ioctl(f, ctypes.c_ulong(termios.TIOCSTI), c), ctypes.get_errno())
    except OSError as e:
        print("TTY", e.errno)
# a pty descriptor of another devpts than the sandbox's own: the caller's
import stat
pts = os.stat("/dev/pts").st_dev
for n in os.listdir("/proc/self/fd"):
    try:
        st = os.stat(f"/proc/self/fd/{n}")
    except OSError:
        continue
    if stat.S_ISCHR(st.st_mode) and 136 <= os.major(st.st_rdev) <= 143 and st.st_dev != pts:
        print("FOREIGN", n)
try:
    print("NAME", os.ttyname(0), os.path.exists(os.ttyname(0)))
except OSError as e:
    print("NAME none", e.errno)
print("DONE")
"""


@pytest.mark.parametrize("ctty", [False, True])
@pytest.mark.parametrize("tty", ["auto", "--no-tty"])
def test_tiocsti(ws, ctty, tty):
    """Injection into the caller's terminal is refused by seccomp either
    way; with a terminal of its own (the default on a tty) the sandbox
    holds no descriptor of the caller's terminal at all, and what its pty
    is (ttyname) exists inside."""
    flags = [] if tty == "auto" else [tty]
    rc, out, pending = run_in_pty([MOAT, "run", "-w", str(ws), *flags, "--", PY, "-c",
                                   TIOCSTI_CODE], cwd=ws, ctty=ctty)
    text = out.decode(errors="replace")
    assert rc == 0, text
    assert "DONE" in text
    assert f"STI -1 {errno.EPERM}" in text
    assert f"STI_HI -1 {errno.EPERM}" in text
    assert f"LINUX -1 {errno.EPERM}" in text
    assert "TTYSTI 0" not in text
    # nothing came back as input to the caller's terminal
    assert b"X" not in pending and b"Y" not in pending, pending
    if tty == "auto":
        assert "FOREIGN" not in text, text
        assert re.search(r"NAME /dev/pts/\d+ True", text), text


# ============================================================================
# Environment, identity, privileges
# ============================================================================

def test_environment_scrubbed(run):
    secret = f"tok-{uid_tag()}"
    env = moat_env({"SECRET_TOKEN": secret, "AWS_SECRET_ACCESS_KEY": secret + "aws",
                    "SSH_AUTH_SOCK": "/tmp/agent-" + secret, "LD_LIBRARY_PATH": "/tmp/" + secret,
                    "GITHUB_TOKEN": secret + "gh"})
    r = run.sh('env; echo ---; tr "\\0" "\\n" < /proc/self/environ; '
               'cat /proc/1/environ; echo DONE', env=env)
    assert "DONE" in r.stdout, r.stderr
    assert secret not in out_of(r)
    names = {l.split("=", 1)[0] for l in r.stdout.split("---")[0].splitlines() if "=" in l}
    ok = {"PATH", "HOME", "TERM", "LANG", "TZ", "COLORTERM", "MOAT_SANDBOX", "PWD",
          "SHLVL", "_", "OLDPWD",
          "npm_config_fetch_retries"}  # 0 with the network off (docs/policy.md)
    assert {n for n in names if not n.startswith("LC_")} <= ok, names


def test_host_identity_of_sandbox_processes(run, ws, reap_marker):
    m = sleep_marker()
    reap_marker.append(m)
    p = run.popen(["-w", ws, "--", "sleep", m])
    try:
        pids = [x for x in sleep_started(m) if x != p.pid]
        assert len(pids) >= 2, "sandbox processes (supervisor, sleep) not found"
        for pid in pids:
            st = proc_status(pid)
            uids, gids = st["Uid"].split(), st["Gid"].split()
            if IS_ROOT:
                assert "0" not in uids, st["Uid"]
                assert "0" not in gids, st["Gid"]
                assert st.get("Groups", "") == "", st.get("Groups")
            else:
                assert set(uids) == {str(os.getuid())}
            assert int(st["CapEff"], 16) == 0, (pid, st["CapEff"])
            assert int(st["CapPrm"], 16) == 0
            assert int(st["CapBnd"], 16) == 0
            assert st["NoNewPrivs"] == "1"
            assert st["Seccomp"] == "2"
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=10)


def test_capabilities_inside(run, is_root):
    r = run.sh('grep -E "^(Cap|NoNewPrivs|Seccomp:|Uid|Gid)" /proc/self/status; '
               'cat /proc/sys/kernel/overflowuid')
    assert r.returncode == 0, r.stderr
    st = dict(l.split(":\t", 1) for l in r.stdout.splitlines() if ":\t" in l)
    for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[k], 16) == 0, (k, st[k])
    assert st["NoNewPrivs"].strip() == "1"
    assert st["Seccomp"].strip() == "2"
    assert "0" not in st["Uid"].split()
    if is_root:
        assert st["Uid"].split() == ["1000"] * 4


def test_setuid_copy_in_workspace(run, ws):
    """Set-id bits are refused (seccomp): a file the sandbox writes belongs to
    the workspace owner on the host, so a set-id bit would hand that identity
    to any host user. The copy runs, as the sandbox's own unprivileged uid."""
    r = run.sh('cp /usr/bin/id ./sid; chmod u+s ./sid; echo chmod=$?; '
               'chmod g+s ./sid; echo chmodg=$?; echo "E=$(./sid -u) U=$(id -u)"')
    assert "chmod=1" in r.stdout and "chmodg=1" in r.stdout, (r.stdout, r.stderr)
    assert "Operation not permitted" in r.stderr
    e = r.stdout.split("E=")[1].split()[0]
    u = r.stdout.split("U=")[1].split()[0]
    assert e == u != "0"
    st = os.stat(ws / "sid")  # on the host
    assert not st.st_mode & (stat.S_ISUID | stat.S_ISGID), oct(st.st_mode)


@needs_root
def test_host_planted_setuid_root_binary_ignored(run, ws):
    sid = ws / "rootid"
    subprocess.run(["cp", "/usr/bin/id", str(sid)], check=True)
    os.chown(sid, 0, 0)
    os.chmod(sid, 0o6755)
    r = run.sh('./rootid; echo "E=$(./rootid -u) G=$(./rootid -g)"; '
               '/usr/bin/su -c "id -u" root </dev/null; echo SU=$?')
    assert "E=" in r.stdout, r.stderr
    assert "E=1000" in r.stdout and "G=1000" in r.stdout
    assert "euid=0" not in r.stdout
    assert "SU=0" not in r.stdout


def test_sandbox_cannot_plant_setuid_for_host(run, ws):
    r = run.sh('cp /usr/bin/id ./planted && chmod 6755 ./planted; ls -ln planted; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    st = os.lstat(ws / "planted")
    if st.st_mode & stat.S_ISUID:
        assert st.st_uid != 0, "setuid-root binary planted on the host"
    if st.st_mode & stat.S_ISGID:
        assert st.st_gid != 0, "setgid-root binary planted on the host"
    assert st.st_uid == os.getuid() or IS_ROOT


# ============================================================================
# Secrets in a writable home
# ============================================================================

def test_existing_secret_dir_in_writable_home(run, fake_home):
    home, secrets = fake_home
    before = snapshot(home)
    r = run.sh('echo evil > ~/.ssh/authorized_keys; echo evil >> ~/.ssh/credentials; '
               'rm -rf ~/.ssh; echo evil > ~/.netrc; mv ~/.aws ~/.aws2; '
               'echo ok > ~/control; echo DONE',
               "--allow-write", home, env=moat_env({"HOME": str(home)}))
    assert "DONE" in r.stdout, r.stderr
    assert (home / "control").is_file()
    (home / "control").unlink()
    after = snapshot(home)
    assert after == before, diff_snap(before, after)


def test_missing_secret_dir_in_writable_home(run, base):
    home = base / "home2"
    home.mkdir()
    r = run.sh('mkdir -p ~/.ssh && echo "ssh-ed25519 AAAA evil" > ~/.ssh/authorized_keys; '
               'mkdir -p ~/.aws && echo evil > ~/.aws/credentials; echo evil > ~/.netrc; '
               'echo DONE', "--allow-write", home, env=moat_env({"HOME": str(home)}))
    assert "DONE" in r.stdout, r.stderr
    assert not (home / ".ssh").exists()
    assert not (home / ".aws").exists()
    assert not (home / ".netrc").exists()


# ============================================================================
# Resource limits
# ============================================================================

@needs_root
def test_fork_bomb_pids_limit(run, ws):
    code = py("""
        import os, time
        n = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(60); os._exit(0)
                n += 1
        except OSError as e:
            print("FORKS", n, e.errno, flush=True)
        os.system("b(){ b|b& }; b")  # and a shell bomb on top
        time.sleep(60)
    """)
    p = run.popen(["-w", ws, "--pids", "64", "--timeout", "3", "--", PY, "-c", code])
    seen = wait_until(lambda: moat_cgroup_dirs(p.pid), timeout=5)
    assert seen, "moat's pids cgroup never appeared"
    t = time.monotonic()
    h = subprocess.run(["true"], timeout=5)  # the host still forks promptly
    assert h.returncode == 0 and time.monotonic() - t < 3
    out, err = p.communicate(timeout=30)
    assert p.returncode == 124, err
    forks = int(out.decode().split("FORKS ")[1].split()[0])
    assert forks < 64
    assert wait_until(lambda: not any(os.path.exists(d) for d in seen), timeout=3), seen
    assert not moat_cgroup_dirs(p.pid)


@needs_root
def test_memory_bomb(run, ws):
    code = "a = []\nwhile True: a.append(bytearray(10**7))\n"
    p = run.popen(["-w", ws, "--memory", "64M", "--", PY, "-c", code])
    seen = wait_until(lambda: moat_cgroup_dirs(p.pid), timeout=5)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 137, err
    assert "out of memory" in err.decode()
    assert seen
    assert not moat_cgroup_dirs(p.pid)


@needs_user
@pytest.mark.parametrize("opt", [["--memory", "64M"], ["--pids", "64"], ["--cpus", "1"]])
def test_limits_fail_closed_unprivileged(run, ws, opt):
    r = run.sh("echo ran > ran.txt", *opt)
    assert r.returncode == 125
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("moat: ")
    assert "cgroup" in r.stderr and "--allow-degraded" in r.stderr
    assert os.listdir(ws) == []


def test_timeout_kills_everything(run, ws, reap_marker):
    m = sleep_marker()
    reap_marker.append(m)
    t = time.monotonic()
    r = run(["-w", ws, "--timeout", "1", "--", "sh", "-c",
             f'trap "" TERM; sleep {m} & (setsid sleep {m} &); sleep {m}'])
    took = time.monotonic() - t
    assert r.returncode == 124, r.stderr
    assert "timed out" in r.stderr
    assert took < 6
    assert wait_until(lambda: not pids_with(m), timeout=2), pids_with(m)


@pytest.mark.parametrize("how", ["setsid", "double-fork", "nohup-daemon"])
def test_orphans_do_not_outlive_command(run, ws, reap_marker, how):
    m = sleep_marker()
    reap_marker.append(m)
    script = {
        "setsid": f"setsid sleep {m} > /dev/null 2>&1 &",
        "double-fork": f"( ( sleep {m} & ) & )",
        "nohup-daemon": (f"{PY} -c 'import os,time\nif os.fork(): os._exit(0)\n"
                         f"os.setsid()\nif os.fork(): os._exit(0)\n"
                         f"import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                         f"os.execvp(\"sleep\", [\"sleep\", \"{m}\"])' &"),
    }[how]
    # wait for the orphan to exist (not a fixed 0.3 s a busy machine outlasts)
    r = run.sh(script + f"\ni=0; while ! pgrep -f {m} >/dev/null && [ $i -lt 600 ]; do "
               f"sleep 0.05; i=$((i+1)); done\npgrep -f {m} >/dev/null && echo RUNNING; exit 0")
    assert r.returncode == 0, r.stderr
    assert "RUNNING" in r.stdout  # the orphan really was started
    assert wait_until(lambda: not pids_with(m), timeout=2), pids_with(m)


def test_sandbox_dies_with_moat(run, ws, reap_marker):
    m = sleep_marker()
    reap_marker.append(m)
    p = run.popen(["-w", ws, "--", "sleep", m])
    assert sleep_started(m), "not started"
    p.kill()
    p.wait()
    assert wait_until(lambda: not pids_with(m), timeout=3), pids_with(m)


# ============================================================================
# Concurrency
# ============================================================================

def test_concurrent_sandbox_renames_placeholder(run, ws, reap_marker):
    m = sleep_marker()
    reap_marker.append(m)
    a = run.popen(["-w", ws, "--", "sleep", m])
    try:
        assert sleep_started(m), "first sandbox not up"
        r = run.sh('chmod 755 .git; mv .git .git.moved; mkdir -p .git/hooks && '
                   'echo evil > .git/hooks/pre-commit; echo DONE')
        assert "DONE" in r.stdout, r.stderr
    finally:
        a.send_signal(signal.SIGTERM)
        a.communicate(timeout=10)
    assert not host_lexists(ws / ".git" / "hooks" / "pre-commit")
    assert os.listdir(ws) == [], os.listdir(ws)


# ---- findings of the security review (persistence through git and agent
# config, deny-write of a whole root, hostile HOME, scan budget) ----------------

def _git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(ws.parent),
                               "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})


def test_git_commondir_redirect_removed(run, ws):
    """.git/commondir would send host git to a config and hooks the sandbox
    wrote; it cannot have a placeholder (git refuses an unreadable one), so
    moat removes one the sandbox created, and says so."""
    assert _git(ws, "init", "-q").returncode == 0
    assert _git(ws, "commit", "-q", "--allow-empty", "-m", "x").returncode == 0
    r = run.sh('mkdir -p evil && printf "[core]\\n\\tfsmonitor = false\\n" > evil/config; '
               'echo ../evil > .git/commondir && echo WROTE')
    assert "WROTE" in r.stdout, r.stderr
    assert not (ws / ".git" / "commondir").exists()
    assert "removed" in r.stderr and "commondir" in r.stderr
    assert _git(ws, "status").returncode == 0


def test_git_existing_commondir_read_only(run, ws):
    assert _git(ws, "init", "-q").returncode == 0
    (ws / ".git" / "commondir").write_text(".\n")
    r = run.sh('echo ../evil > .git/commondir; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    assert (ws / ".git" / "commondir").read_text() == ".\n"


@pytest.mark.parametrize("path", [
    ".git/modules/sub/config", ".git/worktrees/w/commondir", ".git/config.worktree",
    ".claude/settings.json", ".claude/settings.local.json", ".claude/hooks/pre.sh",
    ".bash_aliases", ".zlogin",
])
def test_more_persistence_names(run, ws, path):
    (ws / ".git").mkdir()
    (ws / ".claude").mkdir()
    before = snapshot(ws)
    r = run.sh(f'mkdir -p "$(dirname {path})" 2>/dev/null; echo evil >> {path}; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    assert snapshot(ws) == before, diff_snap(before, snapshot(ws))


def test_existing_submodule_config_read_only(run, ws):
    mod = ws / ".git" / "modules" / "sub"
    (mod / "hooks").mkdir(parents=True)
    (mod / "config").write_text("[core]\n")
    before = snapshot(ws)
    r = run.sh('echo "\\tfsmonitor = evil" >> .git/modules/sub/config; '
               'echo x > .git/modules/sub/hooks/post-checkout; echo DONE')
    assert "DONE" in r.stdout, r.stderr
    assert snapshot(ws) == before, diff_snap(before, snapshot(ws))


@pytest.mark.parametrize("deny", [".", "..", "WS"])
def test_deny_write_of_whole_root(run, ws, deny):
    target = str(ws) if deny == "WS" else deny
    before = snapshot(ws)
    r = run.sh('echo x > f; echo DONE', "--deny-write", target)
    assert "DONE" in r.stdout, r.stderr
    assert "Read-only file system" in r.stderr
    assert snapshot(ws) == before


@pytest.mark.parametrize("home", ["/", "/usr", "/etc", "/usr/lib"])
def test_hostile_home_refused(ws, home):
    r = subprocess.run([MOAT, "run", "-w", str(ws), "--", "true"], capture_output=True,
                       text=True, env={**moat_env(), "HOME": home}, timeout=30)
    assert r.returncode == 125
    assert f"HOME={home}" in r.stderr


def test_scan_budget_fails_closed(run, ws):
    """A tree too big to scan for nested protected names is refused rather
    than run with the names past the budget unprotected."""
    big = ws / "big"
    big.mkdir()
    for i in range(50001):
        (big / f"f{i}").touch()
    sub = ws / "zsub"
    (sub / ".git" / "hooks").mkdir(parents=True)
    r = run.sh('echo x > zsub/.git/hooks/post-checkout; echo RAN')
    assert r.returncode == 125, r.stderr
    assert "RAN" not in r.stdout and "entries" in r.stderr
    assert not (sub / ".git" / "hooks" / "post-checkout").exists()


@pytest.mark.parametrize("target", ["/etc", "/usr/local", "/usr/lib"])
def test_workspace_symlink_into_system_dir_refused(base, target):
    """A workspace path that an earlier run turned into a symlink to a system
    directory must not make that directory writable (run as root it would be
    id-mapped to the sandbox)."""
    link = base / "ws-link"
    os.symlink(target, link)
    before = sorted(os.listdir(target))
    r = subprocess.run([MOAT, "run", "-w", str(link), "--", SH, "-c",
                        "touch moat-e2e-planted; echo RAN"],
                       capture_output=True, text=True, env=moat_env(), timeout=30)
    if IS_ROOT:  # root runs would id-map it to the sandbox: refused
        assert r.returncode == 125, r.stderr
        assert "system directory" in r.stderr and target in r.stderr
        assert "RAN" not in r.stdout
    # rootless runs write with the user's own rights: nothing lands either
    assert sorted(os.listdir(target)) == before


def test_allow_write_system_dir_refused(run):
    r = run.sh("touch /usr/local/moat-e2e-planted; echo RAN", "--allow-write", "/usr/local")
    if IS_ROOT:
        assert r.returncode == 125 and "system directory" in r.stderr
    assert not os.path.exists("/usr/local/moat-e2e-planted")


def test_secret_parent_stays_creatable_in_writable_home(run, base):
    """With a writable home that has no ~/.config, ~/.config itself can be
    created (it is made for real, owned like the home); only the secret
    below it (.config/gcloud) and ~/.ssh stay uncreatable."""
    home = base / "home"
    home.mkdir()
    r = run.sh('mkdir -p ~/.config/tool && echo OK1; mkdir ~/.config/gcloud 2>/dev/null || echo BLOCKED; '
               'mkdir -p ~/.ssh 2>/dev/null; echo k > ~/.ssh/authorized_keys 2>/dev/null || echo BLOCKED2',
               ws=str(home), env={**moat_env(), "HOME": str(home)})
    assert "OK1" in r.stdout and "BLOCKED" in r.stdout and "BLOCKED2" in r.stdout, (r.stdout, r.stderr)
    assert (home / ".config" / "tool").is_dir()
    assert not (home / ".config" / "gcloud").exists()
    assert not (home / ".ssh").exists()
    assert (home / ".config").stat().st_uid == home.stat().st_uid


@pytest.mark.skipif(not IS_ROOT, reason="the refusal is for root runs")
@pytest.mark.parametrize("target", ["/var/spool", "/root", "/opt"])
def test_root_run_refuses_service_and_home_roots(base, target):
    link = base / "ws-link2"
    os.symlink(target, link)
    r = subprocess.run([MOAT, "run", "-w", str(link), "--", SH, "-c", "echo RAN"],
                       capture_output=True, text=True, env=moat_env(), timeout=30)
    assert r.returncode == 125 and "system directory" in r.stderr, r.stderr
    assert "RAN" not in r.stdout


def test_overlapping_runs_do_not_share_writable_placeholders(run, base):
    """Run B protects a deny-write name inside A's workspace; A must not be
    able to write B's placeholder and, through it, any other placeholder."""
    outer = base / "outer"
    inner = outer / "inner"
    inner.mkdir(parents=True)
    # B holds until A is done (a sleep could end first on a busy machine,
    # taking B's placeholders with it and leaving nothing to test)
    b = run.popen(["-w", inner, "--deny-write", inner / "foo", "--", SH, "-c",
                   "echo READY; read x"], stdin=subprocess.PIPE)
    try:
        assert b.stdout.readline() == b"READY\n"
        assert (inner / "foo").exists() and os.path.lexists(inner / ".bashrc")
        r = run.sh('chmod 644 inner/foo 2>/dev/null; echo EVIL > inner/foo 2>/dev/null; echo DONE',
                   ws=str(outer))
        assert "DONE" in r.stdout, r.stderr
        assert os.path.lexists(inner / ".bashrc")  # B was still up
    finally:
        b.communicate(input=b"\n", timeout=60)
    # foo is B's name, not A's: A may write it. No other placeholder (B's
    # .bashrc, .mcp.json, ...) may have received the content with it.
    for n in os.listdir(inner):
        p = inner / n
        if n != "foo" and p.is_file():
            assert "EVIL" not in p.read_text(errors="replace"), n


def test_shared_placeholder_carries_no_content_and_always_goes(run, ws):
    """The mandatory names' file placeholders share one inode. Whoever can
    reach one of the names during the run (the host user here; another
    sandbox that did not mask it in the case it stands for) must not be
    able to write through it into the others, even after a chmod; and a
    changed mode must not keep moat from removing every name at the end."""
    # The command announces that it runs (every placeholder is in place by
    # then) and holds the sandbox up until the checks are done: no wait for
    # one name while another is used, no sleep that a busy machine outlasts.
    p = run.popen(["--", SH, "-c", "echo READY; read x"], stdin=subprocess.PIPE)
    try:
        assert p.stdout.readline() == b"READY\n"
        names = (".zshrc", ".bashrc", ".mcp.json")
        assert all(os.path.lexists(ws / n) for n in names), os.listdir(ws)
        os.chmod(ws / ".zshrc", 0o666)
        for n in names:
            with pytest.raises(OSError):
                with open(ws / n, "w") as f:
                    f.write("EVIL\n")
    finally:
        p.communicate(input=b"\n", timeout=60)
    assert p.returncode == 0
    left = sorted(os.listdir(ws))
    assert left == [], left


def test_nested_repo_commondir_removed(run, ws):
    (ws / "sub").mkdir()
    assert _git(ws / "sub", "init", "-q").returncode == 0
    r = run.sh('echo ../evil > sub/.git/commondir && echo WROTE')
    assert "WROTE" in r.stdout, r.stderr
    assert not (ws / "sub" / ".git" / "commondir").exists()
    assert "sub/.git/commondir" in r.stderr


def test_commondir_behind_readonly_git_dir_removed(run, ws):
    """chmod 555 .git cannot keep moat from removing the commondir."""
    assert _git(ws, "init", "-q").returncode == 0
    r = run.sh('echo ../evil > .git/commondir && chmod 555 .git; echo WROTE')
    assert "WROTE" in r.stdout, r.stderr
    assert not (ws / ".git" / "commondir").exists()
    os.chmod(ws / ".git", 0o755)
