#!/bin/sh
# The E2B end-to-end suite (tests/e2b/*.test.mjs, node --test, the npm e2b
# SDK) against MOAT_BINARY: as root, then as the unprivileged user moate2e
# (created when missing), like tests/e2e/run.sh.
#
#   sh tests/e2b/run.sh build/san/moat [TEST FILE...]
#
# e.g. `sh tests/e2b/run.sh build/san/moat files.test.mjs`; extra node
# arguments in E2B_NODE_ARGS (E2B_NODE_ARGS=--test-name-pattern=pty).
# E2B_PASSES="root user" (default) picks the passes ("root" alone: only the
# root pass). Run by a non-root user, only the unprivileged pass runs.
# tests/e2b/node_modules must exist (`make e2b` runs npm ci first).
# Exit status: non-zero if a pass fails.
set -u

if [ $# -lt 1 ]; then
	echo "usage: $0 MOAT_BINARY [TEST FILE...]" >&2
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
if [ ! -d "$here/node_modules/e2b" ]; then
	echo "run.sh: $here/node_modules/e2b is missing: run (cd tests/e2b && npm ci)" >&2
	exit 2
fi
node=$(command -v node) || { echo "run.sh: node is not installed" >&2; exit 2; }
user=moate2e
passes=${E2B_PASSES:-root user}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# A world-readable copy of the suite (the unprivileged user must read it
# whatever the repository's permissions) and of the binaries, removed on exit.
tmp=$(mktemp -d /tmp/moat-e2b-run.XXXXXX) || exit 2
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
mkdir "$tmp/e2b" "$tmp/bin"
cp "$here"/*.mjs "$here"/package.json "$tmp/e2b/"
cp -R "$here/node_modules" "$tmp/e2b/node_modules"
cp "$bin" "$tmp/bin/moat"
for b in moat-serve moat-client moat-agent moat-gate; do
	[ -f "$(dirname "$bin")/$b" ] && cp "$(dirname "$bin")/$b" "$tmp/bin/$b"
done
chmod -R a+rX "$tmp"

# Sequential files: each starts its own daemon, and the timing assertions
# (streaming) want a quiet machine. Each test is bounded; --test-force-exit
# so that a stray handle cannot keep a pass alive.
targs="--test --test-concurrency=1 --test-timeout=300000 --test-force-exit"

status=0
report=""
run_pass() { # LABEL then a command prefix
	label=$1
	shift
	echo "=== moat e2b: $label ==="
	t0=$(now)
	(cd "$tmp/e2b" && "$@" "$node" $targs ${E2B_NODE_ARGS:-} $tests)
	rc=$?
	line="$label: exit $rc in $(since "$t0")s"
	echo "=== moat e2b: $line"
	report="$report
  $line"
	[ $rc -eq 0 ] || status=1
}

# The test files (or those given as arguments, as names in tests/e2b).
tests=""
for a in "$@"; do
	tests="$tests $(basename "$a")"
done
[ -n "$tests" ] || tests=$(cd "$tmp/e2b" && ls *.test.mjs)

t_all=$(now)
if [ "$(id -u)" -eq 0 ]; then
	for p in $passes; do
		case $p in
		root)
			run_pass "root" env HOME="$(getent passwd root | cut -d: -f6)" MOAT_BIN="$tmp/bin/moat"
			;;
		user)
			if ! id -u "$user" >/dev/null 2>&1; then
				useradd -m -s /bin/sh "$user" || { echo "run.sh: useradd $user failed" >&2; exit 2; }
			fi
			# E2B's sandboxes have users: rootless, a subordinate range
			for f in /etc/subuid /etc/subgid; do
				grep -q "^$user:" "$f" 2>/dev/null || echo "$user:100000:65536" >>"$f"
			done
			uhome=$(getent passwd "$user" | cut -d: -f6)
			[ -d "$uhome" ] || { mkdir -p "$uhome" && chown "$user:" "$uhome"; }
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
echo "=== moat e2b summary:$report
  total: $(since "$t_all")s"
exit $status
