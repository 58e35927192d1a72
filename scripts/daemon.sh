#!/bin/sh
# `make run`'s moat serve in the background, and `make stop`.
#
#   sh scripts/daemon.sh start MOAT_BINARY   start it unless one is up already
#   sh scripts/daemon.sh stop                stop it (its sandboxes keep running,
#                                            as with any moat serve)
# It listens on 127.0.0.1:$MOAT_PORT (7070) with its data in var/moat (its
# log var/moat-serve.log, its pid var/moat-serve.pid) of this checkout, or
# of $MOAT_RUN_DIR instead of var (the tests').
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
port=${MOAT_PORT:-7070}
var=${MOAT_RUN_DIR:-$ROOT/var}
data=$var/moat
pidfile=$var/moat-serve.pid
log=$var/moat-serve.log
url=http://127.0.0.1:$port

healthy() { curl -fs --max-time 5 "$url/healthz" >/dev/null 2>&1; }

# the pid of our daemon, if the pid file names a live moat-serve
running() {
	[ -f "$pidfile" ] || return 1
	pid=$(cat "$pidfile")
	case $pid in '' | *[!0-9]*) return 1 ;; esac
	exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
	[ "${exe##*/}" = moat-serve ]
}

case ${1:-} in
start)
	moat=$2
	if running; then
		echo "moat serve is already up on $url (pid $pid, data $data; make stop stops it)"
		exit 0
	fi
	if healthy; then
		echo "a moat serve already answers on $url (not started by make run); using it"
		exit 0
	fi
	mkdir -p "$var"
	# its own session, output to the log: it outlives make (and a timeout
	# around it) and holds none of its pipes
	setsid "$moat" serve --listen "127.0.0.1:$port" --data "$data" \
		</dev/null >"$log" 2>&1 &
	echo $! >"$pidfile"
	# up when it answers; or gone, with its reason in the log
	i=0
	while ! healthy; do
		if ! running; then
			echo "moat serve did not start:" >&2
			cat "$log" >&2
			rm -f "$pidfile"
			exit 1
		fi
		i=$((i + 1))
		if [ $i -gt 600 ]; then
			echo "moat serve did not answer on $url within 60 s (log: $log)" >&2
			exit 1
		fi
		sleep 0.1
	done
	echo "moat serve started on $url (pid $(cat "$pidfile"), data $data, log $log)"
	;;
stop)
	if ! running; then
		rm -f "$pidfile"
		echo "moat serve (make run's) is not running"
		exit 0
	fi
	kill -TERM "$pid"
	i=0
	while [ -d "/proc/$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$exe" ]; do
		i=$((i + 1))
		if [ $i -gt 600 ]; then
			echo "moat serve (pid $pid) did not stop within 60 s" >&2
			exit 1
		fi
		sleep 0.1
	done
	rm -f "$pidfile"
	echo "moat serve (pid $pid) stopped"
	;;
*)
	echo "usage: $0 start MOAT_BINARY | stop" >&2
	exit 2
	;;
esac
