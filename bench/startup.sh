#!/bin/sh
# Start-up cost: `moat run -- /bin/true` against bubblewrap with a comparable
# (in fact smaller) setup, side by side in one hyperfine run. Prints medians
# and the median ratio moat/bwrap (lower is better; <= 1.0 is the bar).
#   sh bench/startup.sh [path/to/moat] [runs]
set -eu
MOAT=${1:-build/moat}
RUNS=${2:-200}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
command -v hyperfine >/dev/null || { echo "hyperfine missing (apt-get install hyperfine)" >&2; exit 1; }
command -v bwrap >/dev/null || { echo "bwrap missing (apt-get install bubblewrap)" >&2; exit 1; }
ws=$(mktemp -d /tmp/moat-bench.XXXXXX)
out=$(mktemp /tmp/moat-bench.XXXXXX.json)
trap 'rm -rf "$ws" "$out"' EXIT
cd "$ws"
BWRAP="bwrap --unshare-all --die-with-parent --new-session --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true"
hyperfine -N --warmup 20 --runs "$RUNS" --export-json "$out" \
	-n moat "$MOAT run -- /bin/true" \
	-n bwrap "$BWRAP"
python3 - "$out" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
m, b = r["moat"]["median"] * 1e3, r["bwrap"]["median"] * 1e3
print(f"median moat {m:.2f} ms, bwrap {b:.2f} ms, ratio moat/bwrap {m/b:.2f}")
PY
