#!/bin/sh
# Start-up cost: `moat run -- /bin/true` against bubblewrap with a comparable
# setup (`--unshare-all`: user, mount, pid, net, ipc, uts, cgroup namespaces),
# side by side with hyperfine. The machine is noisy, so the comparison runs
# in ROUNDS short rounds, each timing both back to back; it prints each
# round's medians and the median of the per-round ratios moat/bwrap
# (lower is better; the bar is <= 1.0). A second table compares equal work
# (bubblewrap given the read-only binds moat makes by default).
#   sh bench/startup.sh [path/to/moat] [runs-per-round] [rounds]
set -eu
MOAT=${1:-build/moat}
RUNS=${2:-60}
ROUNDS=${3:-5}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
command -v hyperfine >/dev/null || { echo "hyperfine missing (apt-get install hyperfine)" >&2; exit 1; }
command -v bwrap >/dev/null || { echo "bwrap missing (apt-get install bubblewrap)" >&2; exit 1; }
ws=$(mktemp -d /tmp/moat-bench.XXXXXX)
trap 'rm -rf "$ws"' EXIT
cd "$ws"   # an empty workspace: the worst case (every protected name missing)
BWRAP="bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true"
echo "moat: $MOAT ($(id -un)); bwrap $(bwrap --version | cut -d' ' -f2); $(nproc) CPUs; kernel $(uname -r)"
# rounds PREFIX MOAT_CMD BWRAP_CMD: ROUNDS hyperfine runs of both, into
# $ws/PREFIX<i>.json, alternating which goes first (the machine's speed
# drifts within a round).
rounds() {
	r=1
	while [ "$r" -le "$ROUNDS" ]; do
		if [ $((r % 2)) = 1 ]; then
			set -- "$1" "$2" "$3" -n moat "$2" -n bwrap "$3"
		else
			set -- "$1" "$2" "$3" -n bwrap "$3" -n moat "$2"
		fi
		hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$ws/$1$r.json" \
			"$4" "$5" "$6" "$7" "$8" "$9" >/dev/null 2>&1
		set -- "$1" "$2" "$3"
		r=$((r + 1))
	done
}
rounds round "$MOAT run -- /bin/true" "$BWRAP"
# Equal work: a workspace that has every protected name, and bubblewrap
# told to do what moat does by default for it (workspace writable, the
# protected names read-only, /root and /home hidden).
eq="$ws/eq"
DIRS=".git/hooks .git/modules .git/worktrees .vscode .idea .claude/commands .claude/agents .claude/hooks"
for d in $DIRS; do mkdir -p "$eq/$d"; done
BWRAP_EQ="bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --tmpfs /root --tmpfs /home --bind $eq $eq"
for f in .bashrc .bash_profile .bash_login .profile .bash_logout .bash_aliases .zshrc \
	 .zprofile .zshenv .zlogin .gitconfig .gitmodules .git/config .git/config.worktree \
	 .mcp.json .ripgreprc .claude/settings.json .claude/settings.local.json; do
	: > "$eq/$f"
	BWRAP_EQ="$BWRAP_EQ --ro-bind $eq/$f $eq/$f"
done
for d in $DIRS; do
	BWRAP_EQ="$BWRAP_EQ --ro-bind $eq/$d $eq/$d"
done
BWRAP_EQ="$BWRAP_EQ --chdir $eq /bin/true"
rounds eq "$MOAT run -w $eq -- /bin/true" "$BWRAP_EQ"
# The same as 1., with the workspace on tmpfs: what the placeholders cost
# on a journalling filesystem (ext4 here).
shm=$(mktemp -d /dev/shm/moat-bench.XXXXXX)
rounds shm "$MOAT run -w $shm -- /bin/true" "$BWRAP"
rm -rf "$shm"
python3 - "$ws" "$ROUNDS" <<'PY'
import json, statistics, sys
ws, rounds = sys.argv[1], int(sys.argv[2])
def table(prefix, title):
    ratios, ms, bs = [], [], []
    print(title)
    for i in range(1, rounds + 1):
        r = {x["command"]: x for x in json.load(open(f"{ws}/{prefix}{i}.json"))["results"]}
        m, b = r["moat"]["median"] * 1e3, r["bwrap"]["median"] * 1e3
        ms.append(m); bs.append(b); ratios.append(m / b)
        print(f"  round {i}: median moat {m:6.2f} ms, bwrap {b:6.2f} ms, ratio {m/b:.2f}")
    print(f"  overall: median moat {statistics.median(ms):.2f} ms, bwrap {statistics.median(bs):.2f} ms, "
          f"median ratio moat/bwrap {statistics.median(ratios):.2f}")
table("round", "1. the issue's comparison: moat's default in an empty workspace vs bwrap --unshare-all --ro-bind / /")
table("eq", "2. equal work: workspace with every protected name; bwrap given the same read-only binds and hidden homes")
table("shm", "3. as 1., with moat's empty workspace on tmpfs (/dev/shm) instead of ext4")
PY
