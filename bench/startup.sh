#!/bin/sh
# Start-up cost: `moat run -- /bin/true` against bubblewrap with a comparable
# setup (`--unshare-all`: user, mount, pid, net, ipc, uts, cgroup namespaces),
# side by side with hyperfine. The machine is noisy, so the comparison runs
# in ROUNDS short rounds, each timing both back to back; it prints each
# round's medians and the median of the per-round ratios moat/bwrap
# (lower is better; the bar is <= 1.0).
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
i=1
while [ "$i" -le "$ROUNDS" ]; do
	hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$ws/round$i.json" \
		-n moat "$MOAT run -- /bin/true" -n bwrap "$BWRAP" >/dev/null 2>&1
	i=$((i + 1))
done
python3 - "$ws" "$ROUNDS" <<'PY'
import json, statistics, sys
ws, rounds = sys.argv[1], int(sys.argv[2])
ratios, ms, bs = [], [], []
for i in range(1, rounds + 1):
    r = {x["command"]: x for x in json.load(open(f"{ws}/round{i}.json"))["results"]}
    m, b = r["moat"]["median"] * 1e3, r["bwrap"]["median"] * 1e3
    ms.append(m); bs.append(b); ratios.append(m / b)
    print(f"round {i}: median moat {m:6.2f} ms, bwrap {b:6.2f} ms, ratio {m/b:.2f}")
print(f"overall: median moat {statistics.median(ms):.2f} ms, bwrap {statistics.median(bs):.2f} ms, "
      f"median ratio moat/bwrap {statistics.median(ratios):.2f}")
PY
