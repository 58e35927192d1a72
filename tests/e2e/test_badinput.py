"""Bad input: every mistake ends with exit 125 (127/126 for the command),
exactly one line "moat: ..." on stderr naming the culprit, the command not
run, and nothing left on the host (no placeholder in the workspace, no
cgroup, no created path)."""
import json
import os
import re
import subprocess

import pytest

from conftest import MOAT, moat_cgroup_dirs, moat_env, uid_tag


def moat_run(args, ws, env=None):
    """Run `moat run ARGS`; returns (rc, stdout, stderr, moat pid)."""
    p = subprocess.Popen([MOAT, "run"] + [str(a) for a in args], cwd=str(ws),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env or moat_env(), text=True)
    out, err = p.communicate(timeout=30)
    return p.returncode, out, err, p.pid


def check_failure(ws, args, code, culprits, env=None):
    rc, out, err, pid = moat_run(args, ws, env)
    assert rc == code, (rc, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("moat: "), err
    for c in culprits:
        assert c in lines[0], (c, lines[0])
    assert "RAN-" not in out  # the command did not run
    assert os.listdir(ws) == [], os.listdir(ws)  # no placeholder, no file
    assert not moat_cgroup_dirs(pid)
    return lines[0]


def marker_cmd(ws):
    return ["--", "sh", "-c", f"echo RAN-{uid_tag()}; touch {ws}/ran"]


# ---- flags ---------------------------------------------------------------------------

FLAG_CASES = {
    "memory-abc": (["--memory", "abc"], ["--memory", "'abc'"]),
    "memory-0": (["--memory", "0"], ["--memory", "'0'"]),
    "memory-unit": (["--memory", "12Q"], ["--memory", "'12Q'"]),
    "memory-negative": (["--memory", "-5M"], ["--memory", "'-5M'"]),
    "pids-0": (["--pids", "0"], ["--pids", "'0'"]),
    "pids-abc": (["--pids", "abc"], ["--pids", "'abc'"]),
    "pids-huge": (["--pids", "99999999"], ["--pids", "'99999999'"]),
    "cpus-negative": (["--cpus", "-1"], ["--cpus", "'-1'"]),
    "cpus-0": (["--cpus", "0"], ["--cpus", "'0'"]),
    "timeout-x": (["--timeout", "x"], ["--timeout", "'x'"]),
    "timeout-0": (["--timeout", "0"], ["--timeout", "'0'"]),
    "unknown-long": (["--frobnicate"], ["--frobnicate"]),
    "unknown-short": (["-q"], ["-q"]),
    "mode-bogus": (["--mode", "bogus"], ["--mode", "'bogus'"]),
    "net-bogus": (["--net", "bogus"], ["--net", "'bogus'"]),
    "env-bad-name": (["--env", "1BAD=x"], ["--env", "1BAD=x"]),
    "env-dash": (["--env", "A-B"], ["--env", "A-B"]),
    "allow-read-missing": (["--allow-read", "/nonexistent-moat-e2e"],
                           ["allow-read", "/nonexistent-moat-e2e", "No such file"]),
    "allow-write-missing": (["--allow-write", "/nonexistent-moat-e2e"],
                            ["allow-write", "/nonexistent-moat-e2e", "No such file"]),
    "allow-write-root": (["--allow-write", "/"], ["allow-write /", "danger-full-access"]),
    "allow-write-secret": (["--allow-write", "/etc/shadow"], ["/etc/shadow", "secrets"]),
    "workspace-root": (["-w", "/"], ["workspace /", "danger-full-access"]),
}


@pytest.mark.parametrize("case", list(FLAG_CASES))
def test_bad_flag(ws, case):
    args, culprits = FLAG_CASES[case]
    check_failure(ws, ["-w", ws, *args, *marker_cmd(ws)], 125, culprits)


def test_missing_command(ws):
    check_failure(ws, ["-w", ws], 125, ["no command"])
    check_failure(ws, ["-w", ws, "--"], 125, ["no command"])


def test_option_missing_value(ws):
    check_failure(ws, ["--memory"], 125, ["--memory"])


def test_missing_program(ws):
    check_failure(ws, ["-w", ws, "--", "no-such-program-moat-e2e", "arg"], 127,
                  ["no-such-program-moat-e2e", "not found"])


def test_program_not_executable(ws, base):
    prog = base / "prog.sh"
    prog.write_text("#!/bin/sh\necho RAN-x\n")
    os.chmod(prog, 0o644)
    check_failure(ws, ["-w", ws, "--allow-read", base, "--", prog], 126,
                  [str(prog), "Permission denied"])


def test_missing_workspace(ws, base):
    missing = base / "no" / "such" / "ws"
    check_failure(ws, ["-w", missing, *marker_cmd(ws)], 125,
                  [str(missing), "No such file"])
    assert not (base / "no").exists()


def test_workspace_is_a_file(ws, base):
    f = base / "afile"
    f.write_text("x")
    check_failure(ws, ["-w", f, *marker_cmd(ws)], 125, [str(f), "Not a directory"])
    assert f.read_text() == "x"


def test_workspace_inside_secret_dir(ws, base):
    home = base / "home"
    (home / ".ssh").mkdir(parents=True)
    check_failure(ws, ["-w", home / ".ssh", *marker_cmd(ws)], 125,
                  [str(home / ".ssh"), "secrets"], env=moat_env({"HOME": str(home)}))
    assert os.listdir(home / ".ssh") == []


# ---- policy files ------------------------------------------------------------------

def write(base, name, text):
    p = base / name
    p.write_text(text)
    return p


def test_policy_missing_file(ws, base):
    p = base / "nope.json"
    check_failure(ws, ["-w", ws, "--policy", p, *marker_cmd(ws)], 125,
                  [str(p), "No such file"])


def test_srt_missing_file(ws, base):
    p = base / "nope-srt.json"
    check_failure(ws, ["-w", ws, "--srt-settings", p, *marker_cmd(ws)], 125,
                  [str(p), "No such file"])


def test_policy_not_a_file(ws, base):
    check_failure(ws, ["-w", ws, "--policy", base, *marker_cmd(ws)], 125,
                  [str(base), "not a regular file"])


@pytest.mark.parametrize("flag", ["--policy", "--srt-settings"])
def test_malformed_json(ws, base, flag):
    p = write(base, "bad.json", '{\n  "filesystem": {\n    "allowWrite": [1,\n  }\n}\n')
    line = check_failure(ws, ["-w", ws, flag, p, *marker_cmd(ws)], 125, [str(p)])
    m = re.search(re.escape(str(p)) + r":(\d+):(\d+): ", line)
    assert m, line
    assert int(m.group(1)) == 4  # the line of the stray '}'


def test_empty_policy(ws, base):
    p = write(base, "empty.json", "")
    check_failure(ws, ["-w", ws, "--policy", p, *marker_cmd(ws)], 125, [f"{p}:1:"])


POLICY_CASES = {
    "unknown-key": ({"filesystem": {"alow_read": []}}, ["filesystem.alow_read", "unknown key"]),
    "unknown-top-key": ({"netwrok": {}}, ["netwrok", "unknown key"]),
    "unknown-limit": ({"limits": {"memry": "1G"}}, ["limits.memry", "unknown key"]),
    "list-not-array": ({"filesystem": {"allow_read": "/etc"}}, ["filesystem.allow_read", "array"]),
    "list-item-type": ({"filesystem": {"deny_write": [5]}}, ["filesystem.deny_write", "[0]"]),
    "bool-type": ({"filesystem": {"workspace_write": "yes"}}, ["filesystem.workspace_write"]),
    "memory-type": ({"limits": {"memory": True}}, ["limits.memory"]),
    "memory-size": ({"limits": {"memory": "lots"}}, ["limits.memory", "'lots'"]),
    "pids-type": ({"limits": {"pids": "many"}}, ["limits.pids"]),
    "pids-zero": ({"limits": {"pids": 0}}, ["limits.pids"]),
    "cpus-negative": ({"limits": {"cpus": -1}}, ["limits.cpus"]),
    "timeout-type": ({"limits": {"timeout": "soon"}}, ["limits.timeout"]),
    "network-mode": ({"network": {"mode": 5}}, ["network.mode"]),
    "env-type": ({"env": "A=1"}, ["env"]),
    "env-name": ({"env": ["9X=1"]}, ["env[0]", "9X=1"]),
    "mode-bogus": ({"mode": "bogus"}, ["mode", "'bogus'"]),
    "workspace-type": ({"workspace": 5}, ["workspace"]),
    "degraded-type": ({"allow_degraded": 1}, ["allow_degraded"]),
    "top-level-array": ([], ["(top level)"]),
    "filesystem-not-object": ({"filesystem": []}, ["filesystem", "object"]),
}


@pytest.mark.parametrize("case", list(POLICY_CASES))
def test_bad_policy(ws, base, case):
    doc, culprits = POLICY_CASES[case]
    p = write(base, "policy.json", json.dumps(doc, indent=1))
    check_failure(ws, ["-w", ws, "--policy", p, *marker_cmd(ws)], 125, [f"{p}: "] + culprits)


def test_policy_duplicate_key(ws, base):
    p = write(base, "dup.json", '{"limits": {"pids": 5, "pids": 6}}')
    check_failure(ws, ["-w", ws, "--policy", p, *marker_cmd(ws)], 125, [str(p), "duplicate"])


def test_policy_missing_allow_read_path(ws, base):
    p = write(base, "policy.json", json.dumps({"filesystem": {"allow_read": ["/nonexistent-moat-e2e"]}}))
    check_failure(ws, ["-w", ws, "--policy", p, *marker_cmd(ws)], 125,
                  ["/nonexistent-moat-e2e", "No such file"])


SRT_CASES = {
    "unknown-top-key": ({"sandbox": {}}, ["sandbox", "unknown key"]),
    "unknown-fs-key": ({"filesystem": {"allowWrite": [], "bogusKey": 1}},
                       ["filesystem.bogusKey", "unknown key"]),
    "unknown-net-key": ({"network": {"allowedDomain": []}}, ["network.allowedDomain", "unknown key"]),
    "wrong-type": ({"filesystem": {"allowWrite": "."}}, ["filesystem.allowWrite", "array"]),
    "http-proxy": ({"network": {"httpProxyPort": 8080}}, ["network.httpProxyPort"]),
    "fs-disabled": ({"filesystem": {"disabled": True}}, ["filesystem.disabled"]),
}


@pytest.mark.parametrize("case", list(SRT_CASES))
def test_bad_srt_settings(ws, base, case):
    doc, culprits = SRT_CASES[case]
    p = write(base, "srt.json", json.dumps(doc))
    check_failure(ws, ["-w", ws, "--srt-settings", p, *marker_cmd(ws)], 125,
                  [f"{p}: "] + culprits)


def test_bad_policy_applies_nothing(ws, base):
    """A policy that fails half-way must not have changed anything: the run
    is refused as a whole."""
    p = write(base, "policy.json", json.dumps(
        {"filesystem": {"allow_write": [str(base)]}, "limits": {"pids": -1}}))
    check_failure(ws, ["-w", ws, "--policy", p, *marker_cmd(ws)], 125, ["limits.pids"])
    assert sorted(os.listdir(base)) == ["policy.json", "ws"]


def test_unknown_subcommand(ws):
    r = subprocess.run([MOAT, "frobnicate"], capture_output=True, text=True, cwd=ws)
    assert r.returncode == 125
    assert r.stderr.strip().startswith("moat: ") and "frobnicate" in r.stderr
    assert os.listdir(ws) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a uid with no passwd entry (setpriv as root)")
def test_unknown_home_is_refused(tmp_path):
    """HOME unset and the uid unknown to /etc/passwd: moat cannot tell
    which home's secrets to hide, so it refuses rather than guess."""
    os.chmod(tmp_path, 0o777)
    env = {k: v for k, v in moat_env().items() if k != "HOME"}
    r = subprocess.run(["setpriv", "--reuid", "4242", "--regid", "4242", "--clear-groups",
                        MOAT, "run", "--", "/bin/sh", "-c", "echo RAN"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 125, (r.returncode, r.stderr)
    assert "HOME" in r.stderr and "RAN" not in r.stdout, r.stderr
