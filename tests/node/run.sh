#!/bin/sh
# Runs a node end-to-end suite (node --test over PACKAGE_DIR's *.test.mjs,
# at its top or in test/) against MOAT_BINARY: as root, then as the
# unprivileged user moate2e (created when missing), like tests/e2e/run.sh.
#
#   sh tests/node/run.sh PACKAGE_DIR MOAT_BINARY [TEST FILE...]
#
# e.g. `sh tests/node/run.sh tests/mcp build/san/moat stdio.test.mjs`;
# extra node arguments in NODE_TEST_ARGS (--test-name-pattern=pty).
# NODE_PASSES="root user" (default) picks the passes ("root" alone: only the
# root pass). Run by a non-root user, only the unprivileged pass runs.
# PACKAGE_DIR/node_modules must exist (the Makefile runs npm ci first).
# The package, tests/node and the binaries are copied to a world-readable
# directory with the repository's layout (the unprivileged user must read
# them whatever the checkout's permissions; relative imports still work).
# Exit status: non-zero if a pass fails.
set -u

if [ $# -lt 2 ]; then
	echo "usage: $0 PACKAGE_DIR MOAT_BINARY [TEST FILE...]" >&2
	exit 2
fi
. "$(dirname "$0")/../passes.sh"
pkg=$1
set_bin "$2"
shift 2
[ -d "$pkg" ] || { echo "run.sh: $pkg is not a directory" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
pkg=$(cd "$pkg" && pwd)
rel=${pkg#"$root"/}
[ "$rel" != "$pkg" ] || { echo "run.sh: $pkg is not inside $root" >&2; exit 2; }
name=$(basename "$pkg")
if [ ! -d "$pkg/node_modules" ]; then
	echo "run.sh: $pkg/node_modules is missing: run (cd $rel && npm ci)" >&2
	exit 2
fi
node=$(command -v node) || { echo "run.sh: node is not installed" >&2; exit 2; }
user=moate2e
passes=${NODE_PASSES:-root user}

make_tmp moat-node-run
mkdir -p "$tmp/repo/$rel" "$tmp/repo/tests/node" "$tmp/bin"
(cd "$pkg" && tar cf - --exclude=./node_modules .) | (cd "$tmp/repo/$rel" && tar xf -) || exit 2
cp -R "$pkg/node_modules" "$tmp/repo/$rel/node_modules"
cp "$root"/tests/node/*.mjs "$tmp/repo/tests/node/"
# the registry fixture (python) some suites start (clients/js/test/registry-helper.py)
mkdir -p "$tmp/repo/tests/oci" && cp "$root"/tests/oci/fixture.py "$tmp/repo/tests/oci/"
copy_bins "$tmp/bin"
chmod -R a+rX "$tmp"

# Sequential files: each starts its own daemon, and timing-sensitive tests
# want a quiet machine. Each test is bounded; --test-force-exit so that a
# stray handle cannot keep a pass alive.
targs="--test --test-concurrency=1 --test-timeout=300000 --test-force-exit"

tests=""
for a in "$@"; do
	case $a in
	*/*) tests="$tests $a" ;;
	*) if [ -f "$pkg/test/$a" ]; then tests="$tests test/$a"; else tests="$tests $a"; fi ;;
	esac
done
[ -n "$tests" ] || tests=$(cd "$tmp/repo/$rel" && ls *.test.mjs test/*.test.mjs 2>/dev/null)
[ -n "$tests" ] || { echo "run.sh: no *.test.mjs in $rel" >&2; exit 2; }

suite() { # a command prefix
	(cd "$tmp/repo/$rel" && "$@" "$node" $targs ${NODE_TEST_ARGS:-} $tests)
}
run_pass() { # LABEL then a command prefix
	label=$1
	shift
	timed_pass "$name" "$label" suite "$@"
}

t_all=$(now)
if [ "$(id -u)" -eq 0 ]; then
	for p in $passes; do
		case $p in
		root)
			run_pass "root" env HOME="$(getent passwd root | cut -d: -f6)" MOAT_BIN="$tmp/bin/moat"
			;;
		user)
			# (users-mode sandboxes, E2B's, are rootless: a subordinate range)
			ensure_user "$user"
			run_pass "unprivileged ($user)" runuser -u "$user" -- env -i \
				PATH=/usr/local/bin:/usr/bin:/bin HOME="$uhome" USER="$user" LOGNAME="$user" \
				LANG=C.UTF-8 MOAT_BIN="$tmp/bin/moat"
			;;
		*) echo "run.sh: unknown pass $p (root, user)" >&2; exit 2 ;;
		esac
	done
else
	echo "run.sh: not root: only the unprivileged pass runs, as $(id -un)" >&2
	run_pass "unprivileged ($(id -un))" env MOAT_BIN="$tmp/bin/moat"
fi
echo "=== moat $name summary:$report
  total: $(since "$t_all")s"
exit $status
