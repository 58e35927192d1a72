"""What the sandbox looks like from inside (issue 12, items 6, 7, 9):
its own accounts (no host account name), placeholders that are readable
and empty (git quiet, still impossible to create), and a PATH without the
directories the sandbox cannot see. Checked through the host where the
host is what matters (nothing written, nothing left)."""

import os
import pwd
import grp
import shutil
import subprocess

import pytest

from conftest import IS_ROOT, MOAT, SH, moat_env, uid_tag
from test_serve import Daemon, make_rootfs, quiet_delete


def host_names():
    """Every account and group name of the host."""
    names = {p.pw_name for p in pwd.getpwall()}
    names |= {g.gr_name for g in grp.getgrall()}
    with open("/etc/passwd") as f:  # the file itself, whatever NSS adds
        names |= {line.split(":")[0] for line in f if ":" in line}
    return names


def me():
    """The sandbox user's name: sandbox as root, the caller's own rootless."""
    return "sandbox" if IS_ROOT else pwd.getpwuid(os.geteuid()).pw_name


ALLOWED = {"root", "nobody", "nogroup"}


def words(text):
    out = set()
    for line in text.splitlines():
        for w in line.replace("(", " ").replace(")", " ").replace(",", " ") \
                     .replace(":", " ").replace("=", " ").split():
            out.add(w)
    return out


# ---- item 6: who am I inside ------------------------------------------------

def test_accounts_are_the_sandboxs_own(run, ws):
    (ws / "mine").write_text("x\n")
    script = (
        "id; echo WHOAMI=$(whoami); echo HOME=$HOME; "
        "echo PWHOME=$(getent passwd $(id -u) | cut -d: -f6); "
        "echo ---PASSWD; getent passwd; echo ---GROUP; getent group; "
        "echo ---LS; ls -l mine; echo UNMAPPED=$(stat -c %U /usr/bin/env)")
    r = run.sh(script)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"WHOAMI={me()}\n" in out, out
    home = out.split("HOME=", 1)[1].split("\n", 1)[0]
    assert f"PWHOME={home}\n" in out, out
    passwd = out.split("---PASSWD\n")[1].split("---GROUP\n")[0]
    inside = {line.split(":")[0] for line in passwd.splitlines()}
    assert inside == {"root", me(), "nobody"}, passwd
    assert f"uid={os.geteuid() if not IS_ROOT else 1000}({me()})" in out, out
    ls = out.split("---LS\n")[1].splitlines()[0]
    assert ls.split()[2] == me() and ls.split()[3] == me(), ls
    # host root's file: its owner is not mapped, so it is the overflow id
    assert "UNMAPPED=nobody\n" in out, out
    leaked = (host_names() - ALLOWED - {me()}) & words(out)
    assert not leaked, (leaked, out)


def test_host_accounts_do_not_resolve_inside(run, ws):
    """Not through NSS either (files, systemd, sss...): every host name is
    looked up by name inside and none is found."""
    names = sorted(host_names() - ALLOWED - {me()})
    assert names
    script = "for n in " + " ".join(names) + \
        "; do getent passwd $n && echo LEAK=$n; getent group $n && echo LEAK=$n; done; " \
        "ls -l /etc/shadow /etc/gshadow 2>/dev/null; cat /etc/shadow /etc/gshadow; echo END"
    r = run.sh(script)
    assert "LEAK=" not in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("END"), r.stdout
    # the shadow files are masked: nothing read from them
    for line in r.stdout.splitlines():
        assert ":" not in line or line.startswith("-"), r.stdout


def test_users_mode_shows_no_human_account(run, ws):
    """Users mode keeps the host's system accounts (packages' files name
    them) with root and user; no host person (uid >= 1000) shows."""
    r = run(["-w", ws, "--users", "--", SH, "-c", "id; whoami; getent passwd"])
    if r.returncode == 125 and "subordinate" in r.stderr:
        pytest.skip(r.stderr)
    assert r.returncode == 0, r.stderr
    assert "uid=1000(user)" in r.stdout and "\nuser\n" in r.stdout, r.stdout
    people = {p.pw_name for p in pwd.getpwall()
              if p.pw_uid >= 1000 and p.pw_uid != 65534 and p.pw_name != "user"}
    leaked = people & words(r.stdout)
    assert not leaked, (leaked, r.stdout)


def test_image_accounts(srv):
    """An image (moat serve's "image"): its files are kept when they name
    the sandbox's ids, else the sandbox's line is added to the image's
    text; the image itself is never written."""
    rf = srv.allowed / f"rootfs-acc-{uid_tag()}"
    make_rootfs(rf)
    uid = 1000 if IS_ROOT else os.geteuid()
    gid = 1000 if IS_ROOT else os.getegid()
    (rf / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nimg:x:7:7::/:/bin/sh\n")
    (rf / "etc" / "group").write_text(f"root:x:0:\nimgers:x:{gid}:\n")
    for n in ("passwd", "group"):
        os.chmod(rf / "etc" / n, 0o644)
    before = {n: (rf / "etc" / n).read_text() for n in ("passwd", "group")}
    sid = srv.create(image=str(rf))["id"]
    try:
        out = srv.sh(sid, "while read -r l; do echo P:$l; done < /etc/passwd; "
                          "while read -r l; do echo G:$l; done < /etc/group")
    finally:
        quiet_delete(srv, sid)
    lines = out.splitlines()
    assert "P:root:x:0:0:root:/root:/bin/sh" in lines, out
    assert "P:img:x:7:7::/:/bin/sh" in lines, out
    assert any(l.startswith("P:") and f":x:{uid}:{gid}:" in l for l in lines), out
    # the image's group names gid already: the image's file, as it is
    assert [l[2:] for l in lines if l.startswith("G:")] == ["root:x:0:", f"imgers:x:{gid}:"], out
    assert {n: (rf / "etc" / n).read_text() for n in ("passwd", "group")} == before
    shutil.rmtree(rf, ignore_errors=True)


@pytest.fixture(scope="module")
def srv():
    d = Daemon(allow=True)
    yield d
    d.stop()


def test_served_accounts(srv):
    """moat serve: the same through /v1 exec, for a plain sandbox and a
    users-mode one (root and user)."""
    hostn = host_names()
    b = srv.create()
    try:
        out = srv.sh(b["id"], "id; whoami; getent passwd; ls -ld .")
        inside = {line.split(":")[0] for line in out.splitlines() if line.count(":") == 6}
        assert inside == {"root", me(), "nobody"}, out
        assert f"\n{me()}\n" in out, out
        leaked = (hostn - ALLOWED - {me()}) & words(out)
        assert not leaked, (leaked, out)
    finally:
        quiet_delete(srv, b["id"])
    r = srv.post("/v1/sandboxes", {"users": True})
    if r.status != 201:
        pytest.skip(f"users mode unavailable here: {r}")
    sid = r.json()["id"]
    try:
        srv.agent_pid(sid)
        # /v1 acts as user (root is the E2B door's); both are named
        out = srv.sh(sid, "id; whoami; getent passwd root user; echo HOME=$HOME")
        assert "uid=1000(user)" in out and "\nuser\n" in out, out
        assert "root:x:0:0:" in out and "user:x:1000:1000:user:/home/user:" in out, out
        people = {p.pw_name for p in pwd.getpwall()
                  if p.pw_uid >= 1000 and p.pw_uid != 65534 and p.pw_name != "user"}
        assert not people & words(out), out
    finally:
        quiet_delete(srv, sid)


# ---- item 7: placeholders readable and empty ----------------------------------

PH_DIRS = (".idea", ".vscode", ".claude")
PH_FILES = (".bashrc", ".mcp.json", ".gitconfig", ".zshrc")


def _git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_placeholders_quiet_for_git_and_readable(run, ws):
    assert _git(ws, "init", "-q").returncode == 0
    before = sorted(os.listdir(ws))
    script = (
        "git status --porcelain 2>/tmp/err; echo RC=$?; echo ---ERR; cat /tmp/err; "
        "echo ---READ; cat " + " ".join(PH_FILES) + " && echo READ-OK; "
        "for d in " + " ".join(PH_DIRS) + "; do ls -A $d && echo LS-OK:$d; done; "
        "echo ---WRITE; "
        "for f in " + " ".join(PH_FILES) + "; do echo EVIL >> $f && echo WROTE:$f; "
        "  rm -f $f && echo RM:$f; mv $f moved && echo MV:$f; done; "
        "for d in " + " ".join(PH_DIRS) + "; do mkdir $d/x && echo MKDIR:$d; "
        "  touch $d/settings.json && echo TOUCH:$d; chmod 777 $d && echo CHMOD:$d; "
        "  rmdir $d && echo RMDIR:$d; mv $d moved && echo MV:$d; done; echo END")
    r = run.sh(script)
    out = r.stdout
    assert "RC=0\n" in out, (out, r.stderr)
    err = out.split("---ERR\n")[1].split("---READ\n")[0]
    assert err == "", err  # no "could not open directory" warning
    status = out.split("RC=0\n")[0].splitlines()
    for d in PH_DIRS:
        assert f"?? {d}/" not in status, status
    # the host's file placeholders are one socket inode: git's scan, by the
    # directory's entry types, skips them (docs/SECURITY.md "Placeholders")
    assert status == [], status
    rd = out.split("---READ\n")[1].split("---WRITE\n")[0]
    assert rd.splitlines() == ["READ-OK"] + [f"LS-OK:{d}" for d in PH_DIRS], rd
    wr = out.split("---WRITE\n")[1]
    assert wr.strip() == "END", wr
    # the host: nothing written, nothing left
    assert sorted(os.listdir(ws)) == before, os.listdir(ws)
    assert not (ws / "moved").exists()


# ---- item 9: PATH without what the sandbox cannot see -------------------------

def test_path_drops_hidden_entries_keeps_order(run, ws, outside):
    (outside / "bin").mkdir()          # exists on the host, not shown inside
    (ws / "bin").mkdir()               # shown (the workspace)
    home = os.environ.get("HOME", "/root")
    path = ":".join([f"{home}/.pyenv/shims", "/usr/bin", str(outside / "bin"),
                     str(ws / "bin"), "/no/such/dir", "/bin"])
    r = run(["-w", ws, "--", "/usr/bin/env"], env=moat_env({"PATH": path}))
    assert r.returncode == 0, r.stderr
    got = [l[5:] for l in r.stdout.splitlines() if l.startswith("PATH=")]
    assert got == [":".join(["/usr/bin", str(ws / "bin"), "/bin"])], r.stdout
    # the command is still found through what is left
    r = run(["-w", ws, "--", "env"], env=moat_env({"PATH": path}))
    assert r.returncode == 0, r.stderr
