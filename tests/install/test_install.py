"""`make install` and `make uninstall` into a temporary DESTDIR, and the
installed binaries run from there: moat finds its helpers in
PREFIX/libexec/moat (and moat serve finds the agent, moat the gateway);
the man pages render and name every option their --help lists; bash and
zsh completion complete every option; the systemd unit's ExecStart starts
the installed daemon with its StateDirectory as data directory; uninstall
leaves no file behind.

Run by tests/install/run.sh (`make install-check`, part of `make check`),
as root; what depends on the user also runs as the unprivileged moate2e.
"""
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = os.environ.get("BUILD", "build")
PREFIX = "/usr/local"
IS_ROOT = os.geteuid() == 0
USER = "moate2e"
TIMEOUT = 120
# The files `make install` puts under DESTDIR/PREFIX, and only those.
INSTALLED = {
    "bin/moat",
    "libexec/moat/moat-serve", "libexec/moat/moat-client",
    "libexec/moat/moat-agent", "libexec/moat/moat-gate",
    "share/man/man1/moat.1", "share/man/man1/moat-run.1",
    "share/man/man8/moat-serve.8", "share/man/man5/moat-policy.5",
    "share/bash-completion/completions/moat", "share/zsh/site-functions/_moat",
    "lib/systemd/system/moat.service",
}
# --xyz a --help names that belongs to another command (not completed for
# this one): token's help says where serve reads the token from, run's
# that serve passes its own --net-allow.
MENTIONS = {"token": {"--token-file"}, "run": {"--net-allow"}, "resume": {"--release"}}


def sh(*cmd, check=True, **kw):
    kw.setdefault("timeout", TIMEOUT)
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, **kw)
    if check:
        assert r.returncode == 0, f"{shlex.join(map(str, cmd))}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def make(*args):
    return sh("make", "-s", "--no-print-directory", f"BUILD={BUILD}", *args, cwd=ROOT,
              timeout=600)


@pytest.fixture(scope="module")
def inst():
    """DESTDIR with moat installed; world-readable, for the unprivileged user."""
    top = Path(tempfile.mkdtemp(prefix="moat-install-"))
    top.chmod(0o755)
    dest = top / "dest"
    try:
        make("install", f"PREFIX={PREFIX}", f"DESTDIR={dest}")
        yield {"top": top, "dest": dest, "prefix": dest / PREFIX.lstrip("/")}
    finally:
        shutil.rmtree(top, ignore_errors=True)


def moat(inst):
    return str(inst["prefix"] / "bin" / "moat")


def tree(d):
    return sorted(str(p.relative_to(d)) for p in Path(d).rglob("*") if not p.is_dir())


def help_of(inst, *cmd):
    return sh(moat(inst), *cmd, "--help").stdout


def options(text):
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


def commands(inst):
    """The commands of `moat --help` (the completion's first words)."""
    text = help_of(inst)
    block = text.split("commands:\n", 1)[1].split("\n\n", 1)[0]
    out = []
    for line in block.splitlines():
        for alt in re.split(r"\s{3,}", line.strip())[0].split(" | "):
            out.append(alt.split()[0])
    return out


def as_user(cmd, home, env=None):
    e = {"PATH": "/usr/bin:/bin", "HOME": str(home), **(env or {})}
    return ["runuser", "-u", USER, "--", "env", "-i",
            *[f"{k}={v}" for k, v in e.items()], *cmd]


# ---- the installed files ---------------------------------------------------

def test_install_puts_each_file_in_its_place(inst):
    assert set(tree(inst["prefix"])) == INSTALLED
    assert tree(inst["dest"]) == sorted(f"{PREFIX.lstrip('/')}/{f}" for f in INSTALLED)
    for f in ("bin/moat", "libexec/moat/moat-serve", "libexec/moat/moat-agent"):
        assert os.access(inst["prefix"] / f, os.X_OK), f


# ---- the installed binaries run -------------------------------------------

def test_installed_moat_runs_a_command(inst, tmp_path):
    r = sh(moat(inst), "run", "-w", str(tmp_path), "--", "sh", "-c", "echo ran")
    assert r.stdout == "ran\n"
    # the gateway (libexec/moat/moat-gate) starts too
    r = sh(moat(inst), "run", "-w", str(tmp_path), "--allow-domain", "example.com",
           "--", "sh", "-c", "echo $HTTPS_PROXY")
    assert r.stdout.strip(), r


@pytest.mark.skipif(not IS_ROOT, reason="needs root to switch to the test user")
def test_installed_moat_runs_a_command_as_a_user(inst):
    home = inst["top"] / "uhome"
    home.mkdir(exist_ok=True)
    shutil.chown(home, USER, USER)
    r = sh(*as_user([moat(inst), "run", "-w", str(home), "--", "id", "-u"], home))
    assert r.stdout.strip() == str(pwd.getpwnam(USER).pw_uid)


def test_installed_doctor(inst):
    r = sh(moat(inst), "doctor", check=False)
    assert "isolation layers" in r.stdout and "cannot find" not in r.stderr, r


def test_moat_alone_says_where_it_looked(inst, tmp_path):
    """Only moat copied elsewhere: the error names the places it tried."""
    lone = tmp_path / "bin" / "moat"
    lone.parent.mkdir()
    shutil.copy(moat(inst), lone)
    r = sh(str(lone), "ls", check=False)
    assert r.returncode == 125
    assert f"cannot find moat-client: looked for {lone.parent}/moat-client, " \
           f"{tmp_path}/libexec/moat/moat-client" in r.stderr, r.stderr
    r = sh(str(lone), "run", "-w", str(tmp_path), "--allow-domain", "example.com", "--",
           "true", check=False)
    assert r.returncode == 125 and "cannot find moat-gate" in r.stderr, r.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
            return True
    except OSError:
        return False


def wait_for(cond, what, proc, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        assert proc.poll() is None, f"{what}: the daemon exited {proc.returncode}"
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def unit_exec_start(inst):
    unit = (inst["prefix"] / "lib/systemd/system/moat.service").read_text()
    line = next(l for l in unit.splitlines() if l.startswith("ExecStart="))
    return shlex.split(line[len("ExecStart="):])


def test_the_units_exec_start_serves_from_its_state_directory(inst):
    """What systemd would run: ExecStart (the installed path, with
    MOAT_SERVE_ARGS from /etc/default/moat), with NoNewPrivileges and
    $STATE_DIRECTORY as the unit sets them; then create, exec and rm
    through the installed client. The create clones a git_repo, which
    moat-serve (in libexec/moat) does with `moat run` (in bin)."""
    argv = unit_exec_start(inst)
    assert argv[:2] == [f"{PREFIX}/bin/moat", "serve"] and argv[2:] == ["$MOAT_SERVE_ARGS"]
    state = inst["top"] / "state"
    state.mkdir()
    repos = inst["top"] / "repos"
    repo = repos / "r"
    repo.mkdir(parents=True)
    g = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    sh(*g, "init", "-q", "-b", "main")
    (repo / "a.txt").write_text("cloned\n")
    sh(*g, "add", "a.txt")
    sh(*g, "commit", "-q", "-m", "one")
    for dp, _, fns in os.walk(inst["top"] / "repos"):
        os.chmod(dp, 0o755)
        for f in fns:
            os.chmod(os.path.join(dp, f), 0o644)
    manifest = inst["top"] / "manifest.json"
    manifest.write_text(json.dumps({"entries": {"r": {"type": "git_repo", "repo": str(repo)}}}))
    port = free_port()
    log = open(inst["top"] / "serve.log", "w+")
    env = {**os.environ, "STATE_DIRECTORY": str(state)}
    p = subprocess.Popen(["setpriv", "--no-new-privs", moat(inst), "serve",
                          "--listen", f"127.0.0.1:{port}", "--pool", "0",
                          "--allow-host-path", str(repos)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for(lambda: healthy(port), "moat serve's /healthz", p)
        assert (state / "moat.lock").exists(), list(state.iterdir())
        cenv = {**os.environ, "MOAT_URL": f"http://127.0.0.1:{port}"}
        sid = sh(moat(inst), "create", env=cenv).stdout.strip()
        assert re.fullmatch(r"[a-z0-9]+", sid), sid
        r = sh(moat(inst), "exec", sid, "--", "sh", "-c", "echo hi > a.txt; cat a.txt", env=cenv)
        assert r.stdout == "hi\n"
        cloned = sh(moat(inst), "create", "--manifest", str(manifest), env=cenv).stdout.strip()
        r = sh(moat(inst), "exec", cloned, "--", "cat", "r/a.txt", env=cenv)
        assert r.stdout == "cloned\n", r
        sh(moat(inst), "rm", cloned, env=cenv)
        listed = json.loads(sh(moat(inst), "ls", "--json", env=cenv).stdout)
        assert sid in json.dumps(listed)
        sh(moat(inst), "rm", sid, env=cenv)
    finally:
        stop(p)
        log.seek(0)
        print(log.read())


@pytest.mark.skipif(not IS_ROOT, reason="needs root to switch to the test user")
def test_a_users_default_data_dir_is_under_xdg_state(inst):
    """A normal user's daemon, without --data: ~/.local/state/moat."""
    home = inst["top"] / "dhome"
    home.mkdir()
    shutil.chown(home, USER, USER)
    port = free_port()
    log = open(inst["top"] / "userserve.log", "w+")
    p = subprocess.Popen(as_user([moat(inst), "serve", "--listen", f"127.0.0.1:{port}",
                                  "--pool", "0"], home),
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: healthy(port), "the user's moat serve", p)
        data = home / ".local/state/moat"
        assert (data / "moat.lock").exists()
        assert os.stat(data).st_uid == pwd.getpwnam(USER).pw_uid
        assert (os.stat(data).st_mode & 0o777) == 0o700
    finally:
        stop(p)
        log.seek(0)
        print(log.read())


# ---- man pages --------------------------------------------------------------

def render(page):
    r = sh("man", "-l", str(page), env={**os.environ, "MANWIDTH": "200", "MAN_KEEP_FORMATTING": ""})
    # one spelling of a hyphen, whatever groff chose
    return re.sub("[\u2010\u2011\u2212]", "-", r.stdout)


@pytest.mark.parametrize("page", ["man1/moat.1", "man1/moat-run.1", "man8/moat-serve.8",
                                  "man5/moat-policy.5"])
def test_man_page_renders_and_lints(inst, page):
    path = inst["prefix"] / "share/man" / page
    text = render(path)
    name = Path(page).stem
    assert re.search(rf"^NAME\n\s+{re.escape(name)} - ", text, re.M), text[:400]
    if shutil.which("mandoc"):
        sh("mandoc", "-T", "lint", "-W", "error", str(path))


def test_moat_1_has_every_option_of_every_help(inst):
    text = render(inst["prefix"] / "share/man/man1/moat.1")
    helps = [help_of(inst)] + [help_of(inst, c) for c in commands(inst)
                               if c not in ("serve", "run", "version")
                               and sh(moat(inst), c, "--help", check=False).returncode == 0]
    for h in helps:
        missing = options(h) - options(text)
        assert not missing, f"moat(1) lacks {missing}"


@pytest.mark.parametrize("page,cmd", [("man1/moat-run.1", "run"), ("man8/moat-serve.8", "serve")])
def test_man_page_has_every_option_of_its_help(inst, page, cmd):
    text = render(inst["prefix"] / "share/man" / page)
    missing = options(help_of(inst, cmd)) - options(text)
    assert not missing, f"{page} lacks {missing}"


def test_moat_policy_5_is_docs_policy_md(inst):
    text = render(inst["prefix"] / "share/man/man5/moat-policy.5")
    md = (ROOT / "docs/policy.md").read_text()
    for heading in re.findall(r"^##+ (.+)$", md, re.M):
        plain = re.sub(r"[`*]", "", heading)
        assert plain in text, f"moat-policy(5) lacks the section {plain!r}"
    assert options(md) <= options(text), options(md) - options(text)


# ---- completion -------------------------------------------------------------

def bash_complete(inst, words):
    """What the installed bash completion offers for the last of words."""
    comp = inst["prefix"] / "share/bash-completion/completions/moat"
    script = (f". {shlex.quote(str(comp))}; COMP_WORDS=({' '.join(map(shlex.quote, words))}); "
              f"COMP_CWORD={len(words) - 1}; _moat; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
    return set(sh("bash", "-c", script).stdout.split())


def zsh_complete(inst, words):
    comp = inst["prefix"] / "share/zsh/site-functions/_moat"
    script = ("compadd() { [[ $1 == -a ]] && print -l -- ${(P)2}; }; _files() { print FILES; }; "
              f"words=({' '.join(map(shlex.quote, words))}); CURRENT={len(words)}; "
              f"PREFIX={shlex.quote(words[-1])}; . {shlex.quote(str(comp))}")
    return set(sh("zsh", "-f", "-c", script).stdout.split())


SHELLS = [bash_complete] + ([zsh_complete] if shutil.which("zsh") else [])


@pytest.mark.parametrize("complete", SHELLS, ids=lambda f: f.__name__)
def test_completion_has_every_command_and_option(inst, complete):
    cmds = commands(inst)
    assert complete(inst, ["moat", ""]) >= set(cmds)
    for c in cmds:
        if c == "version":
            continue
        r = sh(moat(inst), c, "--help", check=False)
        if r.returncode != 0:
            continue  # (a --help that fails has nothing to complete)
        want = options(r.stdout) - MENTIONS.get(c, set())
        got = complete(inst, ["moat", c, "-"])
        assert want <= got, f"moat {c}: not completed: {want - got}"
    # after "--", the sandboxed command's words are not moat's options
    assert not (complete(inst, ["moat", "run", "--", "-"]) & options(help_of(inst, "run")))


def test_mentions_are_really_other_commands_options(inst):
    """MENTIONS above stays honest: each is an option of some command."""
    every = set().union(*(options(help_of(inst, c)) for c in ("serve", "run", "pause")))
    for c, m in MENTIONS.items():
        assert m <= every and not (m & bash_complete(inst, ["moat", c, "-"])), (c, m)


# ---- the systemd unit -------------------------------------------------------

def test_systemd_unit(inst):
    unit = inst["prefix"] / "lib/systemd/system/moat.service"
    text = unit.read_text()
    for want in ("StateDirectory=moat", "Delegate=yes", "KillMode=process"):
        assert want in text, want
    assert "ProtectSystem" not in re.sub(r"#.*", "", text)
    if not shutil.which("systemd-analyze"):
        pytest.skip("no systemd-analyze here")
    # verified as systemd would load it, ExecStart pointed into DESTDIR (it
    # checks that the binary is there); the man page is not installed yet
    copy = inst["top"] / "verify" / "moat.service"
    copy.parent.mkdir(exist_ok=True)
    copy.write_text(text.replace(f"ExecStart={PREFIX}/", f"ExecStart={inst['prefix']}/"))
    r = sh("systemd-analyze", "verify", "--man=no", str(copy), check=False)
    assert r.returncode == 0 and "moat.service" not in r.stderr, r.stderr


# ---- make run's daemon (scripts/daemon.sh) ---------------------------------

def test_make_runs_daemon_starts_once_and_make_stop_stops_it(inst):
    """A second start says it is up and succeeds; stop ends the daemon and
    is fine when nothing runs (issue 12: a second make run failed with 125)."""
    port = free_port()
    run_dir = inst["top"] / "run"
    env = {**os.environ, "MOAT_PORT": str(port), "MOAT_RUN_DIR": str(run_dir)}
    daemon = str(ROOT / "scripts/daemon.sh")
    first = sh("sh", daemon, "start", moat(inst), env=env)
    assert "moat serve started" in first.stdout and healthy(port), first
    pid = int((run_dir / "moat-serve.pid").read_text())
    try:
        again = sh("sh", daemon, "start", moat(inst), env=env)
        assert f"already up on http://127.0.0.1:{port} (pid {pid}" in again.stdout, again
        assert healthy(port)
    finally:
        stop_ = sh("sh", daemon, "stop", env=env)
    assert f"(pid {pid}) stopped" in stop_.stdout
    assert not healthy(port) and not (run_dir / "moat-serve.pid").exists()
    assert not os.path.exists(f"/proc/{pid}/exe") or \
        not os.readlink(f"/proc/{pid}/exe").endswith("moat-serve")
    assert "not running" in sh("sh", daemon, "stop", env=env).stdout


# ---- the README's first screen -------------------------------------------------

def test_readme_names_every_command_and_the_make_targets(inst):
    """README.md shows each command of `moat --help` (ps and kill were
    missing) and its first screen the make targets a newcomer needs, each
    a target the Makefile has."""
    readme = (ROOT / "README.md").read_text()
    for c in commands(inst):
        if c != "version":
            assert re.search(rf"\bmoat {c}\b", readme), f"README.md never shows moat {c}"
    first = "\n".join(readme.splitlines()[:30])
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
    for t in ("run", "stop", "check", "install"):
        assert f"make {t}" in first and t in targets, t
    assert "MOAT_URL" in readme and "apply_patch format or a unified diff" in readme


# ---- the Python client, offline ---------------------------------------------

def test_python_client_installs_offline_with_debians_setuptools(tmp_path):
    """The command clients/python/README.md gives: a venv that sees
    Debian's setuptools and wheel, pip without an index or build isolation
    (issue 12: pip fetched setuptools from PyPI). Its build output stays out
    of git's view."""
    src = ROOT / "clients/python"
    before = {p.name for p in src.iterdir()} | {p.name for p in (src / "moat").iterdir()}
    venv = tmp_path / "venv"
    sh("/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv))
    try:
        r = sh(str(venv / "bin/pip"), "install", "--no-index", "--no-build-isolation",
               str(src), env={**os.environ, "PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull},
               cwd=tmp_path, timeout=300)
        assert "Successfully installed moat-sandbox" in r.stdout, r.stdout
        if (ROOT / ".git").exists():  # (a git checkout: the build output is ignored)
            made = sh("git", "ls-files", "--others", "--exclude-standard", str(src),
                      cwd=ROOT).stdout
            assert made == "", f"the build left files git does not ignore:\n{made}"
    finally:
        # what the build made in the tree (and only that) goes
        for p in list(src.iterdir()) + list((src / "moat").iterdir()):
            if p.name not in before and (p.name == "build" or p.name.endswith(".egg-info")):
                shutil.rmtree(p)
    # the installed package, imported from the venv, not from the tree
    r = sh(str(venv / "bin/python"), "-c",
           "import moat, sys; print(moat.__file__); print(moat.Sandbox.__name__)", cwd=tmp_path)
    where, name = r.stdout.split()
    assert where.startswith(str(venv)) and name == "Sandbox", r.stdout


# ---- uninstall (last) -------------------------------------------------------

def test_uninstall_leaves_no_file(inst):
    make("uninstall", f"PREFIX={PREFIX}", f"DESTDIR={inst['dest']}")
    assert tree(inst["dest"]) == []
    assert not (inst["prefix"] / "libexec/moat").exists()
