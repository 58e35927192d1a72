#!/bin/sh
# `make run`: a short tour of moat run, showing allowed and refused operations.
MOAT=${1:-build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
ws=$(mktemp -d /tmp/moat-demo.XXXXXX)
secret=$(mktemp /tmp/moat-demo-secret.XXXXXX)
echo "top secret" > "$secret"
cd "$ws" || exit 1
trap 'rm -rf "$ws" "$secret"' EXIT

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; echo "(exit $?)"; }

echo "moat demo — workspace $ws"
step "$MOAT" doctor
step "$MOAT" run -- sh -c 'echo hello > notes.txt && cat notes.txt && id'
step "$MOAT" run -- cat "$secret"
step "$MOAT" run -- sh -c 'cat ~/.ssh/id_rsa; cat /etc/shadow'
step "$MOAT" run -- sh -c 'echo pwned >> .bashrc; mkdir -p .git/hooks'
step "$MOAT" run -- sh -c 'echo pwned > /etc/motd; touch /tmp/x; ls /tmp'
step "$MOAT" run -- python3 -c 'import socket; socket.create_connection(("1.1.1.1", 443), 2)'
step "$MOAT" run --timeout 1 -- sleep 5
step "$MOAT" run -- no-such-command
printf '\nthe workspace on the host afterwards:\n'
ls -la "$ws"
