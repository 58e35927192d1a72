#!/bin/sh
# `make install-check`: install into a temporary DESTDIR and test what got
# installed (tests/install/test_install.py says what).
#
#   sh tests/install/run.sh [PYTEST ARGS...]     (BUILD= picks the build dir)
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 2
exec /usr/bin/python3 -m pytest -p no:cacheprovider -q -rfE "$here/test_install.py" "$@"
