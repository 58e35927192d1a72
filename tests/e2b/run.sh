#!/bin/sh
# The E2B end-to-end suite (tests/e2b/*.test.mjs, node --test, the npm e2b
# SDK) against MOAT_BINARY, as root and then as the unprivileged user:
# tests/node/run.sh over this package.
#
#   sh tests/e2b/run.sh build/san/moat [TEST FILE...]
#
# E2B_PASSES="root user" (default) picks the passes; extra node arguments in
# E2B_NODE_ARGS (E2B_NODE_ARGS=--test-name-pattern=pty).
here=$(cd "$(dirname "$0")" && pwd)
NODE_PASSES=${E2B_PASSES:-${NODE_PASSES:-root user}} NODE_TEST_ARGS=${E2B_NODE_ARGS:-${NODE_TEST_ARGS:-}} \
	exec sh "$here/../node/run.sh" "$here" "$@"
