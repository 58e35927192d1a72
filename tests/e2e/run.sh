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
bin=$1
shift
case $bin in
/*) ;;
*) bin=$(pwd)/$bin ;;
esac
if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
	echo "run.sh: $bin is not an executable file" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
user=moate2e

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Everything temporary lives in one world-readable directory, removed on
# exit: a copy of the tests (so that no pass writes into the repository and
# the unprivileged user can read them whatever the repository's
# permissions), a copy of the binary, pytest's scratch space.
tmp=$(mktemp -d /tmp/moat-e2e-run.XXXXXX) || exit 2
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir "$tmp/tests" "$tmp/bin"
cp "$here"/conftest.py "$here"/test_*.py "$tmp/tests/"
# the API document and the router, for the test that keeps them in step
cp "$here/../../docs/API.md" "$here/../../src/serve/api.c" "$tmp/tests/"
cp "$bin" "$tmp/bin/moat"
# moat serve and the API client are sibling binaries
for b in moat-serve moat-client moat-agent moat-gate; do
	[ -f "$(dirname "$bin")/$b" ] && cp "$(dirname "$bin")/$b" "$tmp/bin/$b" && chmod 755 "$tmp/bin/$b"
done
chmod 755 "$tmp/tests" "$tmp/bin" "$tmp/bin/moat"
chmod 644 "$tmp/tests"/*.py "$tmp/tests"/API.md "$tmp/tests"/api.c

# run_suite LABEL COMMAND-PREFIX...: run the suite once, report the time.
status=0
report=""
run_suite() { # LABEL then env assignments / runuser prefix
	label=$1
	shift
	echo "=== moat e2e: $label ==="
	t0=$(now)
	(cd "$tmp" && "$@" "$py" -m pytest -p no:cacheprovider \
		--rootdir "$tmp/tests" -q -rfExX "$tmp/tests")
	rc=$?
	line="$label: exit $rc in $(since "$t0")s"
	echo "=== moat e2e: $line"
	report="$report
  $line"
	[ $rc -eq 0 ] || status=1
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
	if ! id -u "$user" >/dev/null 2>&1; then
		useradd -m -s /bin/sh "$user" || { echo "run.sh: useradd $user failed" >&2; exit 2; }
	fi
	# users mode rootless (test_users.py) maps a subordinate range
	for f in /etc/subuid /etc/subgid; do
		grep -q "^$user:" "$f" 2>/dev/null || echo "$user:100000:65536" >>"$f"
	done
	uhome=$(getent passwd "$user" | cut -d: -f6)
	if [ ! -d "$uhome" ]; then
		mkdir -p "$uhome" && chown "$user:" "$uhome"
	fi
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
