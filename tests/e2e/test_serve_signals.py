"""A served command's signal dispositions are its own, not the agent's."""
import os

import pytest

from test_serve import AGENT, SERVE, Daemon

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)),
    reason="moat-serve / moat-agent not built")


def test_commands_start_with_no_signal_ignored():
    """The agent ignores SIGPIPE (and the daemon may run under nohup): its
    commands must not inherit that (a shell cannot trap an ignored signal)."""
    d = Daemon()
    try:
        r = d.post("/v1/sandboxes", {})
        assert r.status == 201, r
        sid = r.json()["id"]
        r = d.post(f"/v1/sandboxes/{sid}/exec", {"cmd": "grep '^SigIgn' /proc/self/status"})
        assert r.status == 200, r
        j = r.json()
        assert j["exit_code"] == 0, j
        # the standard signals (1-31); glibc keeps 32 and 33 for itself, and
        # a real-time one the caller ignored is not what a shell traps
        assert int(j["stdout"].split()[1], 16) & 0x7fffffff == 0, j["stdout"]
    finally:
        d.stop()
