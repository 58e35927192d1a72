#!/bin/sh
# `make run`: a short tour of moat run, showing allowed and refused
# operations, then moat serve started in the background (scripts/daemon.sh;
# `make stop` stops it) and a first session with it. Every command shown
# is quoted so that it can be pasted.
MOAT=${1:-build/moat}
MOAT=$(cd "$(dirname "$MOAT")" && pwd)/$(basename "$MOAT")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ws=$(mktemp -d /tmp/moat-demo.XXXXXX)
secret=$(mktemp /tmp/moat-demo-secret.XXXXXX)
echo "top secret" > "$secret"
cd "$ws" || exit 1
trap 'rm -rf "$ws" "$secret"' EXIT

# the arguments as one shell line (single quotes where needed)
quote() {
	line=
	for a in "$@"; do
		case $a in
		'' | *[!A-Za-z0-9_./:=@%+,-]*) a="'$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'" ;;
		esac
		line="$line${line:+ }$a"
	done
	printf '%s' "$line"
}
show() { printf '\n\033[1m$ %s\033[0m\n' "$(quote "$@")"; }
step() { show "$@"; "$@"; echo "(exit $?)"; }

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

# moat serve in the background (already up from an earlier make run: that
# one), a first session with curl, then the client commands.
serve=$(dirname "$MOAT")/moat-serve
if [ -x "$serve" ]; then
	port=${MOAT_PORT:-7070}
	url=http://127.0.0.1:$port
	printf '\n'
	sh "$ROOT/scripts/daemon.sh" start "$MOAT" || exit 1
	api() {
		show curl -s -X"$1" "$url$2" ${3:+-d "$3"}
		curl -s -X"$1" "$url$2" ${3:+-d "$3"}
		echo
	}
	manifest='{"manifest":{"entries":{"hello.py":{"type":"file","content":"print(\"hi from the sandbox\")\n"}}}}'
	show curl -s -XPOST "$url/v1/sandboxes" -d "$manifest"
	out=$(curl -s -XPOST "$url/v1/sandboxes" -d "$manifest")
	printf '%s\n' "$out"
	id=$(printf '%s' "$out" | sed -n 's/.*"id":"\([a-z0-9]*\)".*/\1/p')
	[ -n "$id" ] || { echo "moat serve did not create a sandbox" >&2; exit 1; }
	api POST "/v1/sandboxes/$id/exec" '{"cmd":"python3 hello.py; id; cat /etc/shadow"}'
	api GET "/v1/sandboxes/$id/files/list?path=."
	export MOAT_URL="$url"
	step "$MOAT" exec "$id" -- sh -c 'echo hi > a.txt; ls'
	step "$MOAT" ps "$id"
	step "$MOAT" ls
	step "$MOAT" rm "$id"
	printf '\nmoat serve keeps running on %s: `make stop` stops it (README.md)\n' "$url"
fi
