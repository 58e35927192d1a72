#!/bin/sh
# `make run`: a short tour of moat run, showing allowed and refused operations.
MOAT=${1:-build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
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

# moat serve: start the daemon, a first session with curl, then keep it up.
serve=$(dirname "$MOAT")/moat-serve
if [ -x "$serve" ]; then
	port=${MOAT_PORT:-7070}
	data=$ROOT/var/moat
	printf '\n\033[1m$ moat serve --listen 127.0.0.1:%s --data %s\033[0m\n' "$port" "$data"
	"$MOAT" serve --listen "127.0.0.1:$port" --data "$data" &
	daemon=$!
	trap 'kill "$daemon" 2>/dev/null; rm -rf "$ws" "$secret"' EXIT INT TERM
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
		sleep 0.2
	done
	api() { printf '\n\033[1m$ curl -X%s %s %s\033[0m\n' "$1" "$2" "${3:-}"; curl -s -X"$1" "http://127.0.0.1:$port$2" ${3:+-d "$3"}; echo; }
	out=$(curl -s -XPOST "http://127.0.0.1:$port/v1/sandboxes" \
		-d '{"manifest":{"entries":{"hello.py":{"type":"file","content":"print(\"hi from the sandbox\")\n"}}}}')
	printf '\n\033[1m$ curl -XPOST /v1/sandboxes (with a manifest)\033[0m\n%s\n' "$out"
	id=$(printf '%s' "$out" | sed -n 's/.*"id":"\([a-z0-9]*\)".*/\1/p')
	api POST "/v1/sandboxes/$id/exec" '{"cmd":"python3 hello.py; id; cat /etc/shadow"}'
	api GET "/v1/sandboxes/$id/files/list?path=."
	api DELETE "/v1/sandboxes/$id"
	printf '\nmoat serve is running on http://127.0.0.1:%s (Ctrl-C stops it; see README)\n' "$port"
	wait "$daemon"
fi
