"""Errors that carry the cause (issue 12, item 8): when moat runs a tool
(git, for a manifest's git_repo) and it fails, the API error quotes the
tool's last stderr lines, bounded and with control bytes escaped, since
part of that text comes from a repository or server the client chose.

Evidence: the /v1 error body, the daemon's log (no raw escape bytes), and
the same create through the E2B and MCP doors."""
import json
import os
import shutil
import socket
import subprocess

import pytest

from conftest import MOAT
from test_serve import Daemon, assert_error, git
from test_gitrepo import make_repo, tree_readable, err_msg

BIN_DIR = os.path.dirname(MOAT)
pytestmark = [
    pytest.mark.skipif(not all(os.access(os.path.join(BIN_DIR, b), os.X_OK)
                               for b in ("moat-serve", "moat-agent", "moat-gate")),
                       reason=f"moat-serve / moat-agent / moat-gate not found next to {MOAT}"),
    pytest.mark.skipif(not shutil.which("git"), reason="git is not installed"),
]


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


def test_probe_messages():
    d = Daemon("--net-allow", "127.0.0.1", allow=True)
    try:
        src = make_repo(d.allowed / "src")
        tree_readable(d.allowed)
        print("REF", err_msg(repo_create(d, src, ref="nope")))
        print("REF2", err_msg(repo_create(d, src, ref="-x")))
        print("NOTREPO", err_msg(repo_create(d, d.allowed)))
        port = free_port()
        r = d.post("/v1/sandboxes", {"network": {"allow": ["127.0.0.1"]}, "manifest": {"entries": {
            "r": {"type": "git_repo", "repo": f"http://127.0.0.1:{port}/x.git"}}}})
        print("UNREACH", r.status, err_msg(r))
        print(d.log()[-3000:])
    finally:
        d.stop()
