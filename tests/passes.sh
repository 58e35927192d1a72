# Sourced by the suite runners (tests/e2e/run.sh, tests/node/run.sh): what
# running a suite once as root and once as the unprivileged user needs.
# POSIX sh; sets and reads the runner's variables named below.

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# bin=$1 made absolute; exit 2 unless it is an executable file.
set_bin() {
	case $1 in
	/*) bin=$1 ;;
	*) bin=$(pwd)/$1 ;;
	esac
	if [ ! -f "$bin" ] || [ ! -x "$bin" ]; then
		echo "run.sh: $bin is not an executable file" >&2
		exit 2
	fi
}

# tmp: a new world-readable directory /tmp/PREFIX.XXXXXX, removed on exit.
make_tmp() {
	tmp=$(mktemp -d "/tmp/$1.XXXXXX") || exit 2
	chmod 755 "$tmp"
	trap 'rm -rf "$tmp"' EXIT
	trap 'exit 130' INT TERM
}

# Copy $bin to DIR/moat and its sibling binaries (moat serve, the API
# client, the agent, the gateway, the OCI test tool) next to it, when built.
copy_bins() {
	cp "$bin" "$1/moat"
	for b in moat-serve moat-client moat-agent moat-gate oci-tool; do
		[ -f "$(dirname "$bin")/$b" ] && cp "$(dirname "$bin")/$b" "$1/$b"
	done
	return 0
}

# The unprivileged user (created when missing, with a subordinate id range
# for rootless users mode) and uhome, its existing home.
ensure_user() {
	if ! id -u "$1" >/dev/null 2>&1; then
		useradd -m -s /bin/sh "$1" || { echo "run.sh: useradd $1 failed" >&2; exit 2; }
	fi
	for f in /etc/subuid /etc/subgid; do
		grep -q "^$1:" "$f" 2>/dev/null || echo "$1:100000:65536" >>"$f"
	done
	uhome=$(getent passwd "$1" | cut -d: -f6)
	if [ ! -d "$uhome" ]; then
		mkdir -p "$uhome" && chown "$1:" "$uhome"
	fi
}

# timed_pass SUITE LABEL COMMAND...: run one pass, print and keep (in
# report) its exit status and time; status=1 when it fails.
status=0
report=""
timed_pass() {
	tp_suite=$1
	tp_label=$2
	shift 2
	echo "=== moat $tp_suite: $tp_label ==="
	tp_t0=$(now)
	"$@"
	tp_rc=$?
	tp_line="$tp_label: exit $tp_rc in $(since "$tp_t0")s"
	echo "=== moat $tp_suite: $tp_line"
	report="$report
  $tp_line"
	[ $tp_rc -eq 0 ] || status=1
}
