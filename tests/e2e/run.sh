#!/bin/sh
# End-to-end escape suite: runs tests/e2e twice against MOAT_BINARY, first
# as root, then as the unprivileged user moate2e (created when missing).
#
#   sh tests/e2e/run.sh build/san/moat [PYTEST ARGS...]
#
# Extra arguments (and $PYTEST_ADDOPTS) are passed to pytest in both passes,
# e.g. `sh tests/e2e/run.sh build/san/moat -k "tiocsti or symlink" -x`.
# Run by a non-root user, only the unprivileged pass runs (as that user).
# Exit status: non-zero if either pass fails.
set -u

if [ $# -lt 1 ]; then
	echo "usage: $0 MOAT_BINARY [PYTEST ARGS...]" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../passes.sh"
set_bin "$1"
shift
py=/usr/bin/python3
user=moate2e

# Everything temporary lives in one world-readable directory, removed on
# exit: a copy of the tests (so that no pass writes into the repository and
# the unprivileged user can read them whatever the repository's
# permissions), a copy of the binary, pytest's scratch space.
make_tmp moat-e2e-run
mkdir "$tmp/tests" "$tmp/bin"
cp "$here"/*.py "$tmp/tests/"
# the OCI fixture (registry, images built offline): tests add tests/oci to sys.path
mkdir "$tmp/tests/oci" && cp "$here/../oci/fixture.py" "$tmp/tests/oci/"
# the API document and the router, for the test that keeps them in step
cp "$here/../../docs/API.md" "$here/../../src/serve/api.c" "$tmp/tests/"
# the example agent that test_agent_example.py runs in a session
cp "$here/../../examples/agent-in-sandbox/agent.py" "$tmp/tests/agent_example.py"
copy_bins "$tmp/bin"
chmod 755 "$tmp/tests" "$tmp/bin" "$tmp/bin"/*
chmod 644 "$tmp/tests"/*.py "$tmp/tests"/API.md "$tmp/tests"/api.c "$tmp/tests"/oci/fixture.py
chmod 755 "$tmp/tests/oci"

# run_suite LABEL COMMAND-PREFIX...: run the suite once, report the time.
suite() { # env assignments / runuser prefix
	(cd "$tmp" && "$@" "$py" -m pytest -p no:cacheprovider \
		--rootdir "$tmp/tests" -q -rfExX "$tmp/tests")
}
run_suite() {
	label=$1
	shift
	timed_pass e2e "$label" suite "$@"
}

# The extra arguments, quoted for pytest's shlex split of PYTEST_ADDOPTS.
addopts=${PYTEST_ADDOPTS:-}
for a in "$@"; do
	q=$(printf '%s' "$a" | sed "s/'/'\\''/g")
	addopts="$addopts '$q'"
done
export PYTEST_ADDOPTS="$addopts"
t_all=$(now)
if [ "$(id -u)" -eq 0 ]; then
	# (users mode rootless, test_users.py, maps its subordinate range)
	ensure_user "$user"
	chmod 755 "$uhome"
	rhome=$(getent passwd root | cut -d: -f6)

	run_suite "root" env HOME="$rhome" MOAT_BIN="$tmp/bin/moat" PYTHONDONTWRITEBYTECODE=1
	run_suite "unprivileged ($user)" runuser -u "$user" -- env -i \
		PATH=/usr/local/bin:/usr/bin:/bin HOME="$uhome" USER="$user" LOGNAME="$user" \
		LANG=C.UTF-8 TERM="${TERM:-dumb}" MOAT_BIN="$tmp/bin/moat" PYTHONDONTWRITEBYTECODE=1 \
		PYTEST_ADDOPTS="$addopts"
else
	echo "run.sh: not root: only the unprivileged pass runs, as $(id -un)" >&2
	run_suite "unprivileged ($(id -un))" env MOAT_BIN="$tmp/bin/moat" PYTHONDONTWRITEBYTECODE=1
fi
echo "=== moat e2e summary:$report
  total: $(since "$t_all")s"
exit $status
