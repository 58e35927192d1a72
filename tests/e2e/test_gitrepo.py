"""A manifest's git_repo entries (issue 9, finding 3 and the nested-repository
point): the daemon never fetches on a sandbox's behalf with its own identity
or network. Each clone runs in a throwaway sandbox (`moat run`) under the
create's own egress rules, without the daemon's git config, credentials or
ssh, and the cloned repository is protected inside the served sandbox like
a nested repository of `moat run`.

Evidence is on the host side: what a loopback listener received, which
marker files the daemon's git config would have made, the bytes of the
cloned .git on the host and what an archive download carries.
"""
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import threading
import http.server
from pathlib import Path

import pytest

from conftest import MOAT, host_lexists, pids_with, uid_tag, wait_until
from test_serve import Daemon, assert_error, comm, end_clones, git, hanging_repo

BIN_DIR = os.path.dirname(MOAT)
pytestmark = [
    pytest.mark.skipif(not all(os.access(os.path.join(BIN_DIR, b), os.X_OK)
                               for b in ("moat-serve", "moat-agent", "moat-gate")),
                       reason=f"moat-serve / moat-agent / moat-gate not found next to {MOAT}"),
    pytest.mark.skipif(not shutil.which("git"), reason="git is not installed"),
]


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and the
    first bytes sent on it, then closes it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.seen = []
        self.stopping = False
        self.th = threading.Thread(target=self._loop, daemon=True)
        self.th.start()

    def _loop(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.stopping:
                c.close()
                return
            c.settimeout(2)
            try:
                data = c.recv(4096)
            except OSError:
                data = b""
            self.seen.append(data)
            c.close()

    def close(self):
        self.stopping = True
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
        except OSError:
            pass
        self.th.join(5)
        self.sock.close()


@pytest.fixture
def listener():
    lst = Listener()
    yield lst
    lst.close()


def make_repo(path, content="v1\n"):
    path.mkdir(parents=True)
    os.chmod(path, 0o755)
    git("init", "-q", "-b", "main", cwd=path)
    (path / "a.txt").write_text(content)
    git("add", "a.txt", cwd=path)
    git("commit", "-q", "-m", "one", cwd=path)
    return path


def tree_readable(root):
    for dp, dns, fns in os.walk(root):
        os.chmod(dp, 0o755)
        for f in fns:
            p = os.path.join(dp, f)
            if not os.path.islink(p):
                os.chmod(p, 0o644)


def err_msg(r):
    return r.json()["error"]["message"]


# ---- fetches obey the sandbox's egress rules ----------------------------------

def test_no_network_refused_naming_the_entry(listener):
    d = Daemon()
    try:
        for entries, where in [
                ({"r": {"type": "git_repo", "repo": f"http://127.0.0.1:{listener.port}/x.git"}},
                 "manifest.entries.r"),
                ({"r": {"type": "git_repo", "repo": f"https://127.0.0.1:{listener.port}/x.git"}},
                 "manifest.entries.r"),
                ({"d": {"type": "dir", "children": {"r": {
                    "type": "git_repo", "repo": f"http://127.0.0.1:{listener.port}/x.git"}}}},
                 "manifest.entries.d.children.r")]:
            r = d.post("/v1/sandboxes", {"manifest": {"entries": entries}})
            assert listener.seen == [], listener.seen
            assert_error(r, 400, "invalid_request", where)
            assert "no network" in err_msg(r), r.json()
        assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    finally:
        d.stop()


def test_host_outside_the_allowlist_refused(listener):
    d = Daemon("--net-allow", "*.example.test", "--net-allow", "127.0.0.0/8")
    try:
        # the sandbox may reach a.example.test only
        r = d.post("/v1/sandboxes", {"network": {"allow": ["a.example.test"]}, "manifest": {
            "entries": {"r": {"type": "git_repo",
                              "repo": f"http://127.0.0.1:{listener.port}/x.git"}}}})
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert "allowlist" in err_msg(r), r.json()
        # the sandbox's allowlist has it, the operator's --net-allow does not
        r = d.post("/v1/sandboxes", {"network": {"allow": ["other.test"],
                                                 "resolve": ["other.test:127.0.0.1"]},
                                     "manifest": {"entries": {"r": {
                                         "type": "git_repo",
                                         "repo": f"http://other.test:{listener.port}/x.git"}}}})
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert "--net-allow" in err_msg(r), r.json()
        assert listener.seen == [], listener.seen
    finally:
        d.stop()


@pytest.mark.parametrize("url", [
    "ssh://127.0.0.1:{port}/x.git",
    "ssh://git@127.0.0.1:{port}/x.git",
    "git://127.0.0.1:{port}/x.git",
    "git@127.0.0.1:x.git",
    "ext::nc 127.0.0.1 {port}",
    "file:///etc",
])
def test_other_transports_refused(listener, url):
    d = Daemon("--net-allow", "127.0.0.0/8")
    try:
        r = d.post("/v1/sandboxes", {"network": {"allow": ["127.0.0.1"]}, "manifest": {
            "entries": {"r": {"type": "git_repo", "repo": url.format(port=listener.port)}}}})
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert listener.seen == [], listener.seen
    finally:
        d.stop()


def test_disk_limit_with_git_repo_refused():
    d = Daemon(allow=True)
    try:
        repo = make_repo(d.allowed / "repo")
        r = d.post("/v1/sandboxes", {"limits": {"disk": 64 << 20}, "manifest": {
            "entries": {"r": {"type": "git_repo", "repo": str(repo)}}}})
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert "limits.disk" in err_msg(r), r.json()
    finally:
        d.stop()


class LoopbackHTTP:
    """python's threaded http.server on 127.0.0.1 (a free port, .port) with
    a handler class; close() stops it."""

    def _serve(self, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.th = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.th.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class DumbGit(LoopbackHTTP):
    """A bare repository served over dumb HTTP on 127.0.0.1 (python's
    http.server); records the paths requested."""

    def __init__(self, root, src):
        self.root = root
        bare = root / "x.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True,
                       capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
        subprocess.run(["git", "-C", str(bare), "update-server-info"], check=True,
                       capture_output=True)
        self.paths = []
        paths = self.paths

        class H(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(root), **kw)

            def log_message(self, *a):
                paths.append(self.path)

        self._serve(H)


def test_http_clone_goes_through_the_gateway_with_a_pin(tmp_path):
    """The positive case: the create allows git.example.test and pins it to
    the loopback server (the operator allows both the name and loopback);
    the clone reaches the server through the gateway, by that name."""
    d = Daemon("--net-allow", "git.example.test", "--net-allow", "127.0.0.1")
    srv = None
    try:
        src = make_repo(d.base / "src", "over http\n")
        srv = DumbGit(d.base / "served", src)
        tree_readable(d.base / "served")
        b = d.create(network={"allow": ["git.example.test"],
                              "resolve": ["git.example.test:127.0.0.1"]},
                     manifest={"entries": {"r": {
                         "type": "git_repo", "repo": f"http://git.example.test:{srv.port}/x.git"}}})
        try:
            assert d.fread(b["id"], "r/a.txt") == b"over http\n"
            assert any(p.startswith("/x.git/info/refs") for p in srv.paths), srv.paths
        finally:
            d.rm(b["id"])
        # the same server by its address: not in the sandbox's allowlist
        n = len(srv.paths)
        r = d.post("/v1/sandboxes", {"network": {"allow": ["git.example.test"],
                                                 "resolve": ["git.example.test:127.0.0.1"]},
                                     "manifest": {"entries": {"r": {
                                         "type": "git_repo",
                                         "repo": f"http://127.0.0.1:{srv.port}/x.git"}}}})
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert len(srv.paths) == n, srv.paths
    finally:
        if srv:
            srv.close()
        d.stop()


# ---- no identity of the daemon's ----------------------------------------------

def test_daemon_git_config_has_no_effect(listener):
    """The daemon's ~/.gitconfig rewrites URLs to the listener, names a hooks
    directory, an fsmonitor and a credential helper that leave markers: none
    of it applies to a manifest's clone."""
    home = Path(f"/tmp/moat-e2e-gitrepo-home-{uid_tag()}")
    home.mkdir(mode=0o755)
    try:
        marks = home / "marks"
        marks.mkdir()
        os.chmod(marks, 0o777)
        hooks = home / "hooks"
        hooks.mkdir()
        for h in ("post-checkout", "pre-commit", "post-merge"):
            (hooks / h).write_text(f"#!/bin/sh\ntouch {marks}/hook-{h}\n")
            os.chmod(hooks / h, 0o755)
        fsm = home / "fsmonitor"
        fsm.write_text(f"#!/bin/sh\ntouch {marks}/fsmonitor\n")
        os.chmod(fsm, 0o755)
        d = Daemon(allow=True, env_extra={"HOME": str(home)})
        try:
            redirected = make_repo(d.allowed / "redirected", "from the host path\n")
            plain = make_repo(d.allowed / "plain", "plain\n")
            (home / ".gitconfig").write_text(
                f'[url "http://127.0.0.1:{listener.port}/"]\n'
                f"\tinsteadOf = {redirected}\n"
                f"\tinsteadOf = file://{redirected}\n"
                "[core]\n"
                f"\thooksPath = {hooks}\n"
                f"\tfsmonitor = {fsm}\n"
                "[credential]\n"
                f"\thelper = !touch {marks}/credential\n")
            os.chmod(home / ".gitconfig", 0o644)
            b = d.create(manifest={"entries": {
                "p": {"type": "git_repo", "repo": str(plain)},
                "q": {"type": "git_repo", "repo": str(redirected)}}})
            try:
                assert d.fread(b["id"], "p/a.txt") == b"plain\n"
                assert d.fread(b["id"], "q/a.txt") == b"from the host path\n"
            finally:
                d.rm(b["id"])
            assert listener.seen == [], listener.seen
            assert sorted(os.listdir(marks)) == []
        finally:
            d.stop()
    finally:
        shutil.rmtree(home, ignore_errors=True)


# ---- the host path transport ------------------------------------------------------

def test_host_path_clone_only_under_allow_host_path():
    d = Daemon(allow=True)
    try:
        repo = make_repo(d.allowed / "repo", "allowed\n")
        b = d.create(manifest={"entries": {"r": {"type": "git_repo", "repo": str(repo)}}})
        try:
            assert d.fread(b["id"], "r/a.txt") == b"allowed\n"
        finally:
            d.rm(b["id"])
        out = make_repo(d.outside / "repo", "outside\n")
        r = d.post("/v1/sandboxes", {"manifest": {"entries": {
            "r": {"type": "git_repo", "repo": str(out)}}}})
        assert_error(r, 403, "forbidden", "manifest.entries.r")
    finally:
        d.stop()


def test_host_repo_cannot_pull_in_objects_from_outside():
    """An allowed repository that borrows its objects from one outside the
    --allow-host-path directories (alternates), or whose .git is a gitfile
    pointing there: the clone sees only the allowed directory, so the
    outside repository's content never reaches the sandbox."""
    d = Daemon(allow=True)
    try:
        secret = f"OUTSIDE-{uid_tag()}\n"
        out = make_repo(d.outside / "repo", secret)
        alt = d.allowed / "alt"
        subprocess.run(["git", "clone", "-q", "--shared", str(out), str(alt)], check=True,
                       capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
        assert (alt / ".git" / "objects" / "info" / "alternates").exists()
        gf = d.allowed / "gitfile"
        gf.mkdir()
        (gf / ".git").write_text(f"gitdir: {out}/.git\n")
        tree_readable(d.base)
        for name, src in (("alternates", alt), ("gitfile", gf)):
            r = d.post("/v1/sandboxes", {"manifest": {"entries": {
                "r": {"type": "git_repo", "repo": str(src)}}}})
            if r.status == 201:
                sid = r.json()["id"]
                got = d.fget(sid, "r/a.txt")
                d.rm(sid)
                assert secret.encode() not in got.body, name
            assert_error(r, 400, "invalid_request", "manifest.entries.r")
    finally:
        d.stop()


# ---- the clone is protected inside the served sandbox ------------------------------

@pytest.mark.parametrize("rel", ["r", "a/b/c/d/e/r"])
def test_cloned_repo_git_dir_protected(rel):
    d = Daemon(allow=True)
    try:
        repo = make_repo(d.allowed / "repo")
        b = d.create(manifest={"entries": {rel: {"type": "git_repo", "repo": str(repo)}}})
        sid = b["id"]
        try:
            hgit = d.ws(sid) / rel / ".git"
            config = (hgit / "config").read_bytes()
            j = d.ex(sid, f"cd {rel}; echo evil > .git/hooks/pre-commit; "
                          "mkdir -p .git/hooks; echo evil > .git/hooks/post-checkout; "
                          "chmod 777 .git/hooks; echo '[core] fsmonitor = evil' >> .git/config; "
                          "mv .git/config .git/c2; mv .git/hooks .git/h2; "
                          "echo x > .git/modules; echo DONE")
            assert "DONE" in j["stdout"], j
            assert not host_lexists(hgit / "hooks" / "pre-commit")
            assert not host_lexists(hgit / "hooks" / "post-checkout")
            assert (hgit / "config").read_bytes() == config
            # git still works there
            j = d.ex(sid, f"git -C {rel} log --format=%s && echo OK")
            assert j["stdout"].endswith("OK\n"), j
            # an archive download carries no planted hook or config
            raw = d.get(f"/v1/sandboxes/{sid}/archive").body
            with tarfile.open(fileobj=io.BytesIO(raw)) as t:
                for m in t.getmembers():
                    if m.isfile() and "/.git/" in "/" + m.name:
                        data = t.extractfile(m).read()
                        assert b"evil" not in data, m.name
                        assert "/hooks/" not in m.name, m.name
        finally:
            d.rm(sid)
    finally:
        d.stop()


def test_abandoned_clone_leaves_no_sandbox_or_seed():
    """The client of a create whose clone hangs hangs up: the throwaway
    sandbox goes with the job (no process anywhere still names the
    repository) and the seed directory is removed."""
    d = Daemon(allow=True)
    try:
        repo = hanging_repo(d)
        body = json.dumps({"manifest": {"entries": {
            "r": {"type": "git_repo", "repo": str(repo)}}}}).encode()
        c = socket.create_connection(("127.0.0.1", d.port), timeout=10)
        c.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert wait_until(lambda: [p for p in pids_with(str(repo)) if comm(p).startswith("git")],
                          timeout=20), "no git clone started"
        seeds = d.data / "clones"
        assert [p for p in seeds.iterdir()], "no seed directory"
        c.close()
        assert wait_until(lambda: not pids_with(str(repo)), timeout=20), \
            [(p, comm(p)) for p in pids_with(str(repo))]
        assert wait_until(lambda: not list(seeds.iterdir()), timeout=10), list(seeds.iterdir())
        assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    finally:
        end_clones(d)
        d.stop()


def test_moat_run_net_ceiling_bounds_the_gateway(listener, tmp_path):
    """moat run --net-ceiling (what a manifest clone gets for each of the
    daemon's --net-allow patterns): a destination the allowlist and a pin
    admit is still refused when the ceiling does not cover it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(ws, 0o777)
    script = ("import urllib.request, sys\n"
              "try:\n"
              f"    urllib.request.urlopen('http://a.example.test:{listener.port}/x', timeout=20)\n"
              "except Exception as e:\n"
              "    print('ERR', getattr(e, 'code', e))\n")
    base = [MOAT, "run", "-w", str(ws), "--allow-domain", "a.example.test",
            "--resolve", "a.example.test:127.0.0.1"]
    for ceiling in (["--net-ceiling", "b.example.test"],
                    ["--net-ceiling", "*.example.test"]):
        r = subprocess.run(base + ceiling + ["--", "/usr/bin/python3", "-c", script],
                           capture_output=True, text=True, timeout=60)
        if ceiling[1] == "b.example.test":
            assert "ERR 403" in r.stdout, (r.stdout, r.stderr)
            assert listener.seen == [], listener.seen
            assert "outside the operator's --net-allow" in r.stderr, r.stderr
        else:
            # the ceiling covers it: the request reaches the listener
            assert len(listener.seen) == 1 and listener.seen[0].startswith(b"GET /x"), \
                (listener.seen, r.stderr)
    r = subprocess.run([MOAT, "run", "-w", str(ws), "--net-ceiling", "x.test", "--", "true"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 125 and "--net-ceiling" in r.stderr, r.stderr


# ---- review findings on the clone code -----------------------------------------

def evil_repo(path):
    """A repository whose tree looks like a .git directory: a config with an
    fsmonitor and a hooks/ directory."""
    make_repo(path)
    (path / "config").write_text("[core]\n\tfsmonitor = touch /tmp/moat-e2e-pwned\n")
    (path / "hooks").mkdir()
    (path / "hooks" / "pre-commit").write_text("#!/bin/sh\necho pwned\n")
    (path / "settings.json").write_text("{}\n")
    git("add", "-A", cwd=path)
    git("commit", "-q", "-m", "evil", cwd=path)
    tree_readable(path)
    return path


@pytest.mark.parametrize("key,where", [
    (".git", "manifest.entries..git"),
    ("./.git", "manifest.entries../.git"),
    ("/workspace/.git/", "manifest.entries./workspace/.git/"),
    ("a/.git", "manifest.entries.a/.git"),
    ("a/.git/b", "manifest.entries.a/.git/b"),
    (".git/hooks", "manifest.entries..git/hooks"),
    (".vscode", "manifest.entries..vscode"),
    (".claude/hooks", "manifest.entries..claude/hooks"),
    (".claude", "manifest.entries..claude"),
    (".bashrc", "manifest.entries..bashrc"),
    (".idea/x", "manifest.entries..idea/x"),
])
def test_git_repo_on_a_protected_name_refused(key, where):
    """A clone under a protected name would put the remote's tree (a config
    with an fsmonitor, hooks) where the engine protects the workspace's
    own: refused before anything runs, as the agent refuses a file there."""
    d = Daemon(allow=True)
    try:
        repo = evil_repo(d.allowed / "evil")
        r = d.post("/v1/sandboxes", {"manifest": {"entries": {
            key: {"type": "git_repo", "repo": str(repo)}}}})
        assert_error(r, 403, "forbidden", where)
        assert "protected" in err_msg(r), r.json()
        assert d.get("/v1/sandboxes").json()["sandboxes"] == []
        # the same below a dir entry
        r = d.post("/v1/sandboxes", {"manifest": {"entries": {"d": {
            "type": "dir", "children": {".git": {"type": "git_repo", "repo": str(repo)}}}}}})
        assert_error(r, 403, "forbidden", "manifest.entries.d.children..git")
        assert d.get("/v1/sandboxes").json()["sandboxes"] == []
        assert not list((d.data / "clones").iterdir()) if (d.data / "clones").exists() else True
    finally:
        d.stop()


def test_git_repo_next_to_protected_names_still_cloned():
    """Neighbours that are not protected: a .git-like name, a repo under a
    directory named like a protected file elsewhere."""
    d = Daemon(allow=True)
    try:
        repo = make_repo(d.allowed / "repo", "ok\n")
        b = d.create(manifest={"entries": {
            ".gitx": {"type": "git_repo", "repo": str(repo)},
            "src/.claudex": {"type": "git_repo", "repo": str(repo)}}})
        try:
            assert d.fread(b["id"], ".gitx/a.txt") == b"ok\n"
            assert d.fread(b["id"], "src/.claudex/a.txt") == b"ok\n"
        finally:
            d.rm(b["id"])
    finally:
        d.stop()


def test_clone_gets_the_operators_limits_and_quotas():
    """The throwaway sandbox of a clone runs under the operator's default
    limits and every --quota ceiling (seen on its moat run command line
    while the clone hangs)."""
    # unprivileged without cgroup delegation a memory limit refuses the run
    root = os.geteuid() == 0
    d = Daemon(*(["--memory", "300M"] if root else []), "--quota", "inotify_instances=3",
               allow=True)
    try:
        repo = hanging_repo(d)
        body = json.dumps({"limits": {"quotas": {"inotify_watches": 100}}, "manifest": {
            "entries": {"r": {"type": "git_repo", "repo": str(repo)}}}}).encode()
        c = socket.create_connection(("127.0.0.1", d.port), timeout=10)
        try:
            c.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

            def runs():
                out = []
                for p in pids_with(str(repo)):
                    try:
                        argv = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")
                    except OSError:
                        continue
                    if len(argv) > 1 and argv[0].endswith(b"/moat") and argv[1] == b"run":
                        out.append([a.decode() for a in argv])
                return out
            got = wait_until(runs, timeout=20)
            assert got, "no moat run for the clone"
            argv = got[0]
            pairs = list(zip(argv, argv[1:]))
            if root:
                assert ("--memory", str(300 << 20)) in pairs, argv
                assert any(a == "--pids" and int(b) > 0 for a, b in pairs), argv
            # every quota, nproc among them (bounds the clone's processes)
            assert any(a == "--quota" and b.startswith("nproc=") for a, b in pairs), argv
            assert ("--quota", "inotify_instances=3") in pairs, argv
            assert ("--quota", "inotify_watches=100") in pairs, argv
        finally:
            c.close()
    finally:
        end_clones(d)
        d.stop()


def test_clone_error_cut_in_a_multibyte_character_is_a_400():
    """The clone's error quotes the repository and git's message, each cut
    at a byte count: cut inside a multibyte character, the message must
    still become a JSON string (a 400, not a 500)."""
    d = Daemon(allow=True)
    try:
        base = len(str(d.allowed.resolve())) + 1
        for pad in (0, 1):
            top = d.allowed / f"u{pad}"
            top.mkdir()
            # not a repository: the clone fails quoting the path
            p = top / (("a" * pad) + "é" * 100) / ("é" * 100)
            p.mkdir(parents=True)
            tree_readable(d.allowed)
            r = d.post("/v1/sandboxes", {"manifest": {"entries": {
                "r": {"type": "git_repo", "repo": str(p)}}}})
            assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert base > 0
    finally:
        d.stop()


def test_git_repo_deep_down_still_checked(listener):
    """A git_repo 70 directory levels down is checked like one at the top."""
    d = Daemon()
    try:
        node = {"r": {"type": "git_repo", "repo": f"http://127.0.0.1:{listener.port}/x.git"}}
        for _ in range(70):
            node = {"d": {"type": "dir", "children": node}}
        r = d.post("/v1/sandboxes", {"manifest": {"entries": node}})
        assert_error(r, 400, "invalid_request", ".d.children" * 70 + ".r")
        assert "no network" in err_msg(r), r.json()
        assert listener.seen == [], listener.seen
        assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    finally:
        d.stop()


@pytest.mark.parametrize("auth", ["user:TOKEN-{tag}", "TOKEN-{tag}", "u:TOKEN-{tag}:x"])
def test_url_with_userinfo_refused(listener, auth):
    """A credential in the URL would be on the clone's command line (any
    local user reads /proc/PID/cmdline) and in error messages: refused,
    pointing to network secrets; nothing is fetched."""
    d = Daemon("--net-allow", "127.0.0.0/8")
    try:
        a = auth.format(tag=uid_tag())
        r = d.post("/v1/sandboxes", {"network": {"allow": ["127.0.0.1"]}, "manifest": {
            "entries": {"r": {"type": "git_repo",
                              "repo": f"http://{a}@127.0.0.1:{listener.port}/x.git"}}}})
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        assert "secrets" in err_msg(r), r.json()
        assert "TOKEN" not in err_msg(r), r.json()
        assert listener.seen == [], listener.seen
    finally:
        d.stop()
