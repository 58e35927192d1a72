"""moat run on a terminal: the sandbox's own pty (docs/ARCHITECTURE.md step 10).

Each test runs moat under a pty the test owns, as a shell would (moat's
session has it as controlling terminal), and drives it through the master.
Everything waits for a marker in the output or a condition in /proc, with a
generous deadline; nothing sleeps and hopes. The markers the commands print
are computed ($((...)), "%s" joins), so that the echo of what was typed
never matches them.
"""
import fcntl
import os
import re
import select
import signal
import stat
import struct
import subprocess
import termios
import time

import pytest

from conftest import (MOAT, PY, moat_env, pids_with, proc_cmdline, proc_status, sleep_marker,
                      sleep_started, wait_until)

DEADLINE = 60


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Term:
    """moat run ARGS on a fresh pty: stdin, stdout and stderr on its slave,
    which is the controlling terminal of moat's new session. The slave
    stays open here too, for tcgetattr before and after."""

    def __init__(self, ws, args, rows=24, cols=80, stdout=None, modes=None):
        self.master, self.slave = os.openpty()
        set_size(self.slave, rows, cols)
        if modes:
            modes(self.slave)
        self.before = termios.tcgetattr(self.slave)
        slave = self.slave

        def pre():
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        self.p = subprocess.Popen(
            [MOAT, "run", "-w", str(ws), *args], stdin=slave,
            stdout=slave if stdout is None else stdout, stderr=slave,
            cwd=str(ws), preexec_fn=pre, env=moat_env({"TERM": "xterm"}))
        self.out = b""

    def read_until(self, marker, timeout=DEADLINE):
        """Output up to marker (bytes or a compiled regex); fails the test
        with everything seen when it does not come."""
        end = time.monotonic() + timeout
        while True:
            found = (marker.search(self.out) if hasattr(marker, "search")
                     else marker in self.out)
            if found:
                return self.out
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {marker!r} in {self.out!r}")
            r, _, _ = select.select([self.master], [], [], min(left, 1.0))
            if r:
                try:
                    d = os.read(self.master, 65536)
                except OSError:
                    d = b""
                if not d:
                    pytest.fail(f"terminal closed before {marker!r}: {self.out!r}")
                self.out += d

    def send(self, data):
        os.write(self.master, data)

    def wait(self, timeout=DEADLINE):
        """moat's exit status, reading its output meanwhile (a full pty
        would block it)."""
        end = time.monotonic() + timeout
        while self.p.poll() is None:
            if time.monotonic() > end:
                self.p.kill()
                self.p.wait()
                pytest.fail(f"moat did not exit: {self.out!r}")
            r, _, _ = select.select([self.master], [], [], 0.2)
            if r:
                try:
                    self.out += os.read(self.master, 65536)
                except OSError:
                    pass
        while select.select([self.master], [], [], 0)[0]:
            try:
                d = os.read(self.master, 65536)
            except OSError:
                break
            if not d:
                break
            self.out += d
        return self.p.returncode

    def raw_now(self):
        """True while moat holds the terminal in raw mode."""
        return termios.tcgetattr(self.slave) != self.before

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


@pytest.fixture
def term(ws):
    made = []

    def start(args, **kw):
        t = Term(ws, args, **kw)
        made.append(t)
        return t
    yield start
    for t in made:
        t.close()


def bash_args(*extra):
    return [*extra, "--env", "PS1=$ ", "--", "bash", "--norc", "--noprofile", "-i"]


def test_tty_names_a_device_inside_and_is_the_controlling_terminal(term):
    t = term(["--", "sh", "-c",
              't=$(tty) && [ -c "$t" ] && printf "%s %s\\n" "NAME" "$t"; '
              '(exec </dev/tty) && printf "%s\\n" "CT""TY"; '
              'ls -l /proc/self/fd/ >/dev/null; exit 5'])
    assert t.wait() == 5, t.out
    assert re.search(rb"NAME /dev/pts/\d+\r\n", t.out), t.out
    assert b"CTTY" in t.out, t.out  # /dev/tty opens: there is a ctty
    assert termios.tcgetattr(t.slave) == t.before


def test_job_control_ctrl_z_fg_ctrl_c(term):
    t = term(bash_args())
    t.send(b"echo R$((40+2))\n")
    out = t.read_until(b"R42")
    assert b"no job control" not in out and b"cannot set terminal process group" not in out, out
    m = sleep_marker()
    t.send(f"sleep {m}\n".encode())
    pids = sleep_started(m, timeout=DEADLINE)
    sl = [p for p in pids if proc_status(p).get("Name") == "sleep"]
    assert sl, pids
    t.send(b"\x1a")  # Ctrl-Z: the sandbox's line discipline stops the job
    t.read_until(b"Stopped")
    assert wait_until(lambda: proc_status(sl[0]).get("State", "").startswith("T"),
                      timeout=DEADLINE)
    t.send(b"fg\n")
    assert wait_until(lambda: not proc_status(sl[0]).get("State", "T").startswith("T"),
                      timeout=DEADLINE), proc_status(sl[0])
    t.send(b"\x03")  # Ctrl-C: a byte, turned into SIGINT inside
    t.send(b"echo RC=$((0))$?\n")
    t.read_until(b"RC=0130")
    t.send(b"exit 3\n")
    assert t.wait() == 3, t.out
    assert termios.tcgetattr(t.slave) == t.before


def test_window_size_and_sigwinch(term):
    code = ("import os, signal, struct, fcntl, termios\n"
            "print('OWN', os.fstat(0).st_dev == os.stat('/dev/pts').st_dev)\n"
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGWINCH})\n"
            "print('SIZE', os.get_terminal_size(0).lines, os.get_terminal_size(0).columns)\n"
            "print('READY', flush=True)\n"
            "signal.sigwait({signal.SIGWINCH})\n"
            "print('NEW', os.get_terminal_size(0).lines, os.get_terminal_size(0).columns)\n")
    t = term(["--", PY, "-c", code], rows=37, cols=123)
    t.read_until(b"READY")
    assert b"OWN True" in t.out, t.out  # the sandbox's pty, not the caller's
    assert b"SIZE 37 123" in t.out, t.out
    # the outer terminal changes size: the kernel tells moat's group
    # (SIGWINCH), moat copies it onto the sandbox's pty
    set_size(t.master, 50, 140)
    t.read_until(b"NEW 50 140")
    assert t.wait() == 0, t.out


def test_stty_size_matches_outer(term):
    t = term(["--", "sh", "-c", 'stty size; tty'], rows=41, cols=99)
    assert t.wait() == 0, t.out
    assert re.search(rb"^41 99\r\n/dev/pts/\d+\r\n", t.out), t.out


@pytest.mark.parametrize("how", ["SIGTERM", "SIGHUP", "hangup", "sandbox-killed"])
def test_terminal_restored_when_moat_is_stopped(term, how):
    m = sleep_marker()
    t = term(["--", "sleep", m])
    pids = sleep_started(m, timeout=DEADLINE)
    assert pids, t.out
    assert wait_until(t.raw_now, timeout=DEADLINE), "moat never made the terminal raw"
    if how == "SIGTERM":
        t.p.send_signal(signal.SIGTERM)
        want = 128 + signal.SIGTERM
    elif how == "SIGHUP":
        t.p.send_signal(signal.SIGHUP)
        want = 128 + signal.SIGHUP
    elif how == "hangup":
        # the terminal goes away: the kernel hangs it up (SIGHUP to moat,
        # the session leader), moat hangs the sandbox's up
        os.close(t.master)
        t.master = os.open("/dev/null", os.O_RDONLY)
        want = 128 + signal.SIGHUP
    else:
        for p in pids:
            if proc_status(p).get("Name") == "sleep":
                os.kill(p, signal.SIGKILL)
        want = 128 + signal.SIGKILL
    assert t.wait() == want, t.out
    assert wait_until(lambda: not pids_with(m), timeout=DEADLINE), "the sandbox lives on"
    if how != "hangup":  # a hung-up terminal has no state left to read
        assert termios.tcgetattr(t.slave) == t.before


def test_termios_restored_after_normal_exit_with_odd_modes(term, ws):
    """Whatever the caller's terminal was set to, it is that again after;
    the sandbox's pty takes the caller's keys (erase ^H here) but keeps
    sane modes of its own (echo on even though the caller's is off)."""
    def odd(fd):
        a = termios.tcgetattr(fd)
        a[3] &= ~termios.ECHO
        a[6][termios.VERASE] = b"\x08"
        termios.tcsetattr(fd, termios.TCSANOW, a)
    t = term(["--", "stty", "-a"], modes=odd)
    assert t.wait() == 0, t.out
    assert b"erase = ^H" in t.out, t.out
    assert re.search(rb"[ \n]echo[ \r]", t.out), t.out
    assert termios.tcgetattr(t.slave) == t.before


def test_no_tty_keeps_no_controlling_terminal(term):
    t = term(["--no-tty", "--", "sh", "-c",
              'tty; (exec </dev/tty) 2>/dev/null && printf "%s\\n" "CT""TY"; printf "%s\\n" "DO""NE"'])
    assert t.wait() == 0, t.out
    assert b"DONE" in t.out
    assert b"not a tty" in t.out, t.out
    assert b"CTTY" not in t.out, t.out
    assert termios.tcgetattr(t.slave) == t.before  # never raw


def test_tty_flag_without_a_terminal_is_an_error(ws):
    r = subprocess.run([MOAT, "run", "-w", str(ws), "--tty", "--", "true"],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env=moat_env(), timeout=DEADLINE)
    assert r.returncode == 125
    assert "--tty" in r.stderr and "not a terminal" in r.stderr, r.stderr


def test_pipes_unchanged(ws):
    r = subprocess.run([MOAT, "run", "-w", str(ws), "--", "sh", "-c",
                        'printf "a\\nb\\n"; echo err >&2; tty'],
                       stdin=subprocess.DEVNULL, capture_output=True,
                       env=moat_env(), timeout=DEADLINE)
    assert r.returncode == 1  # tty: not a tty
    assert r.stdout == b"a\nb\nnot a tty\n"
    assert r.stderr == b"err\n"


def test_stdout_redirected_means_no_tty(term, ws):
    """Auto-detection wants both ends a terminal: `moat run -- cmd > file`
    keeps a plain stdout (no CR LF, stderr apart)."""
    rd, wr = os.pipe()
    t = term(["--", "sh", "-c", 'printf "x\\n"; tty >/dev/null || printf "%s\\n" "NO""TTY" >&2'],
             stdout=wr)
    os.close(wr)
    assert t.wait() == 0, t.out
    with os.fdopen(rd, "rb") as f:
        assert f.read() == b"x\n"
    assert b"NOTTY" in t.out, t.out


def test_tty_flag_with_stdout_redirected(term, ws):
    rd, wr = os.pipe()
    t = term(["--tty", "--", "sh", "-c", 'tty >/dev/null && printf "%s\\n" "HAS""TTY"'],
             stdout=wr)
    os.close(wr)
    assert t.wait() == 0, t.out
    with os.fdopen(rd, "rb") as f:
        assert b"HASTTY\r\n" in f.read()


def test_all_output_arrives_and_status_passes_through(term):
    """The relay drains the master when the command ends: nothing of a
    large burst written right before exit is lost."""
    t = term(["--", "sh", "-c",
              'yes 0123456789 | head -n 20000; printf "%s\\n" "EN""D"; exit 9'])
    assert t.wait() == 9, t.out[-200:]
    assert t.out.count(b"0123456789\r\n") == 20000
    assert t.out.endswith(b"END\r\n"), t.out[-200:]


def test_output_after_the_sandbox_reopens_its_terminal(term, ws):
    """A command that closes every descriptor of its terminal and opens
    /dev/tty again later is still heard, and its status passes through:
    the relay does not give the pty up while the sandbox runs (found by
    review: the line after the reopen was lost). Ordered by files in the
    workspace, not by sleeps."""
    t = term(["--", "sh", "-c",
              'exec 0<&- 1>&- 2>&- </dev/null >/dev/null 2>&1; : > closed; '
              'while [ ! -e go ]; do sleep 0.05; done; '
              'printf "%s\\n" "BACK-""AGAIN" > /dev/tty; exit 4'])
    wait_until(lambda: (ws / "closed").exists(), DEADLINE)
    (ws / "go").touch()
    assert t.wait() == 4, t.out
    assert b"BACK-AGAIN" in t.out, t.out
    assert termios.tcgetattr(t.slave) == t.before


def test_death_by_signal_is_128_plus_n(term):
    t = term(["--", "sh", "-c", "kill -TERM $$"])
    assert t.wait() == 128 + signal.SIGTERM, t.out
    assert termios.tcgetattr(t.slave) == t.before


def test_sandbox_cannot_take_every_pty_of_the_machine(ws):
    """The sandbox's devpts has a ceiling of its own: ptys of non-initial
    devpts instances come from one shared pool (kernel.pty.max less
    kernel.pty.reserve), so without it one sandbox could take them all and
    every other sandbox's `moat run` on a terminal would fail. It opens
    ptys until refused; the ceiling (256) comes well before the pool."""
    prog = ("import os\n"
            "n = 0\n"
            "try:\n"
            "    while n < 400:\n"
            "        os.open('/dev/pts/ptmx', os.O_RDWR | os.O_NOCTTY)\n"
            "        n += 1\n"
            "except OSError as e:\n"
            "    print('refused', e.errno)\n"
            "print('opened', n)\n")
    r = subprocess.run([MOAT, "run", "-w", str(ws), "--no-tty", "--", PY, "-c", prog],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       env=moat_env(), timeout=DEADLINE)
    assert r.returncode == 0, r.stderr
    assert "refused 28" in r.stdout, r.stdout  # ENOSPC
    assert int(r.stdout.split("opened ")[1]) <= 256, r.stdout


def test_no_descriptor_of_the_callers_terminal_stays_in_pid_1(ws):
    """The caller's terminal on a descriptor above 2 (as `3<>/dev/tty` or
    pass_fds leave it): exec closes it for the command, and pid 1 (the
    supervisor, which never execs) must not keep it either. Checked from
    the host, on every descriptor of the sandbox's pid 1."""
    master, slave = os.openpty()
    set_size(slave, 24, 80)
    marker = sleep_marker()

    def pre():
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    p = subprocess.Popen([MOAT, "run", "-w", str(ws), "--", "sleep", marker],
                         stdin=slave, stdout=slave, stderr=slave, pass_fds=(slave,),
                         cwd=str(ws), preexec_fn=pre, env=moat_env({"TERM": "xterm"}))
    try:
        pids = sleep_started(marker, timeout=DEADLINE)
        cmd = [q for q in pids if proc_cmdline(q).startswith(f"sleep {marker}")]
        assert cmd, pids
        sup = int(proc_status(cmd[0])["PPid"])
        rdev = os.fstat(slave).st_rdev
        try:
            fds = os.listdir(f"/proc/{sup}/fd")
        except PermissionError:
            pytest.skip("pid 1 is not dumpable: only root reads its descriptors")
        held = []
        for fd in fds:
            try:
                st = os.stat(f"/proc/{sup}/fd/{fd}")
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev:
                held.append(fd)
        assert held == [], f"pid 1 holds the caller's terminal on {held}"
    finally:
        p.kill()
        p.wait()
        os.close(master)
        os.close(slave)
