"""Errors that carry the cause (issue 12, item 8): when moat runs a tool
(git, for a manifest's git_repo) and it fails, the API error quotes the
tool's last stderr lines, bounded and with control bytes escaped, since
part of that text comes from a repository or server the client chose.

Evidence: the /v1 error body, the daemon's log (no raw escape bytes), and
the same create through the E2B and MCP doors."""
import http.server
import socket

import pytest

from test_serve import Daemon, assert_error
# test_gitrepo's skips too (the daemon's binaries, git)
from test_gitrepo import LoopbackHTTP, make_repo, tree_readable, err_msg, pytestmark  # noqa: F401


def repo_create(d, repo, **entry):
    return d.post("/v1/sandboxes", {"manifest": {"entries": {
        "r": {"type": "git_repo", "repo": str(repo), **entry}}}})


def test_bad_ref_quotes_gits_message():
    d = Daemon(allow=True)
    try:
        src = make_repo(d.allowed / "src")
        tree_readable(d.allowed)
        r = repo_create(d, src, ref="nope")
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        m = err_msg(r)
        assert "git checkout nope failed" in m, m
        # git's own words, not only that it failed
        assert "invalid reference: nope" in m, m
    finally:
        d.stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pkt(b):
    return b"%04x" % (len(b) + 4) + b


class HostileGit(LoopbackHTTP):
    """A smart-HTTP git server on loopback that advertises one branch and
    answers the fetch with sideband messages of its choosing (band 2,
    which git prints as "remote: ...", then band 3, a fatal remote
    error): what a hostile server controls of git's stderr."""

    def __init__(self, messages, error):
        sha = b"1" * 40
        adv = (pkt(b"# service=git-upload-pack\n") + b"0000" +
               pkt(sha + b" HEAD\0multi_ack_detailed side-band-64k thin-pack no-progress "
                   b"ofs-delta agent=git/2\n") +
               pkt(sha + b" refs/heads/main\n") + b"0000")
        res = pkt(b"NAK\n") + b"".join(pkt(b"\x02" + m) for m in messages) + \
            pkt(b"\x03" + error)

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def _send(self, ctype, body):
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send("application/x-git-upload-pack-advertisement", adv)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._send("application/x-git-upload-pack-result", res)

            def log_message(self, *a):
                pass

        self._serve(H)


# by a name pinned to loopback, as test_gitrepo's http clone: through the
# gateway (the sandbox's own 127.0.0.1 is not the host's)
NET = {"allow": ["git.example.test"], "resolve": ["git.example.test:127.0.0.1"]}
NET_ALLOW = ("--net-allow", "git.example.test", "--net-allow", "127.0.0.1")


def http_create(d, url):
    return d.post("/v1/sandboxes", {"network": NET, "manifest": {"entries": {
        "r": {"type": "git_repo", "repo": url}}}})


def test_not_a_repository_keeps_gits_several_lines():
    """git explains a missing repository over four lines, the first of
    which names the cause: the message keeps them, not only the last."""
    d = Daemon(allow=True)
    try:
        (d.allowed / "empty").mkdir()
        tree_readable(d.allowed)
        m = err_msg(repo_create(d, d.allowed / "empty"))
        assert "does not appear to be a git repository" in m, m
        assert "Could not read from remote repository" in m, m
        assert "and the repository exists" in m, m
    finally:
        d.stop()


def test_unreachable_host_quotes_the_connection_error():
    d = Daemon(*NET_ALLOW)
    try:
        port = free_port()
        r = http_create(d, f"http://git.example.test:{port}/x.git")
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        m = err_msg(r)
        assert f"git clone http://git.example.test:{port}/x.git failed" in m, m
        # curl's reason, through the gateway or not
        assert "unable to access" in m and ("onnect" in m or "502" in m), m
    finally:
        d.stop()


ESC_MSG = b"look \x1b[31mred\x1b[0m \x1b]0;title\x07 \xc2\x9b2J bell\x07 \xe2\x80\xaeevil\n"


def test_server_escape_sequences_are_escaped():
    """What the server sends comes back escaped: no ESC, BEL, C1 CSI or
    bidi override in the API message or the daemon's log; the text is
    still there."""
    srv = HostileGit([ESC_MSG], b"denied \x1b[2J by the server\n")
    d = Daemon(*NET_ALLOW)
    try:
        r = http_create(d, f"http://git.example.test:{srv.port}/x.git")
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        m = err_msg(r)
        assert "remote: look \\x1b[31mred\\x1b[0m" in m, m
        assert "\\x07" in m and "\\u009b2J" in m and "\\u202eevil" in m, m
        assert "denied \\x1b[2J by the server" in m, m
        for bad in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert bad not in m, (bad, m)
        log = d.log().encode()
        assert b"\x1b" not in log and b"\x07" not in log and b"\xc2\x9b" not in log, log
    finally:
        d.stop()
        srv.close()


def test_message_is_bounded_and_keeps_the_end():
    """Many long lines from the server: the message keeps the last few,
    bounded, and says that some were left out; the final reason is in."""
    lines = [b"line %02d " % i + b"x" * 150 + b"\n" for i in range(40)]
    srv = HostileGit(lines, b"the final reason\n")
    d = Daemon(*NET_ALLOW)
    try:
        r = http_create(d, f"http://git.example.test:{srv.port}/x.git")
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        m = err_msg(r)
        assert "the final reason" in m, m
        assert "line 00" not in m and "... | " in m, m
        assert len(m.encode()) < 1024, len(m)
    finally:
        d.stop()
        srv.close()


@pytest.mark.parametrize("field", ["repo", "ref"])
def test_control_bytes_in_repo_or_ref_refused_before_any_clone(field):
    """A repo or ref with a control byte is refused up front (it would be
    quoted back raw); nothing is cloned."""
    d = Daemon(allow=True)
    try:
        src = make_repo(d.allowed / "src")
        tree_readable(d.allowed)
        entry = {"ref": "main"}
        repo = str(src)
        if field == "repo":
            repo += "\x1b[31m"
        else:
            entry["ref"] = "ma\x1b]0;x\x07in"
        r = repo_create(d, repo, **entry)
        assert_error(r, 400, "invalid_request", "manifest.entries.r")
        m = err_msg(r)
        assert f"{field} contains a control character" in m, m
        assert "\x1b" not in m, m
        assert d.get("/v1/sandboxes").json()["sandboxes"] == []
    finally:
        d.stop()


def test_mcp_door_shows_the_same_message():
    """The MCP door's sandbox_create goes through the same core: its
    error carries git's words too. (The E2B door takes no manifest.)"""
    from test_mcp import Mcp, TOKEN, text
    d = Daemon("--pool", "0", token=TOKEN, allow=True)
    try:
        src = make_repo(d.allowed / "src")
        tree_readable(d.allowed)
        m = Mcp(d)
        res = m.call("sandbox_create", {"manifest": {"entries": {
            "r": {"type": "git_repo", "repo": str(src), "ref": "nope"}}}})
        assert res.get("isError") is True, res
        t = text(res)
        assert "git checkout nope failed" in t and "invalid reference: nope" in t, t
        m.delete()
    finally:
        d.stop()
