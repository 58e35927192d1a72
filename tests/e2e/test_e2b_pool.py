"""The pool of sandboxes with users (--pool-users): a create of the E2B
door served from it is the door's sandbox (its own access token, its own
host id range), and a restarted daemon never hands out a range a live
sandbox holds."""
import os

import pytest

from test_e2b_api import TOKEN, api, create
from test_serve import AGENT, SERVE, Daemon
from conftest import wait_until

pytestmark = pytest.mark.skipif(
    not (os.access(SERVE, os.X_OK) and os.access(AGENT, os.X_OK)) or os.geteuid() != 0,
    reason="per-sandbox id ranges are a root daemon's")


def host_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    return None


def pooled(d):
    """sandboxes the daemon has set up and not handed out"""
    return [i for i, _, state in d.db_rows() if state == "pooled"]


def test_pooled_users_sandboxes_keep_their_own_ids_across_a_restart():
    d = Daemon("--pool", "0", "--pool-users", "2", token=TOKEN)
    try:
        assert wait_until(lambda: len(pooled(d)) == 2, timeout=30), d.db_rows()
        a = create(d)
        assert a["sandboxID"] not in pooled(d)
        d.kill9()
        d.start()
        assert wait_until(lambda: len(pooled(d)) == 2, timeout=30), d.db_rows()
        b = create(d)
        uids = {}
        for j in (a, b):
            pid = d.agent_pid(j["sandboxID"])
            assert pid, j
            uids[j["sandboxID"]] = host_uid(pid)
        # every live sandbox, pooled or handed out, has a range of its own
        for i, pid, state in d.db_rows():
            if state == "pooled":
                uids[i] = host_uid(pid)
        assert len(set(uids.values())) == len(uids), uids
        assert all(u and u >= 1 << 31 for u in uids.values()), uids
        # a's token still opens a's envd and no other's
        r = api(d, "GET", "/health", key=None,
                headers={"E2b-Sandbox-Id": a["sandboxID"]})
        assert r.status == 204, r
    finally:
        d.stop()
