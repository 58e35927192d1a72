#!/bin/sh
# moat serve benchmarks (bench/serve.py): exec round trip and time to
# interactive against one-shot bubblewrap and `moat run`, and host memory
# per idle sandbox. Builds the optimised binaries first.
#   sh bench/serve.sh [--quick] [other bench/serve.py options]
set -eu
cd "$(dirname "$0")/.."
make -s build/moat build/moat-serve build/moat-agent
exec /usr/bin/python3 bench/serve.py "$@"
