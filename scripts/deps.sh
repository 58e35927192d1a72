#!/bin/sh
# Install the Debian packages moat builds and tests with, when missing.
set -e
PKGS="gcc make pkg-config libseccomp-dev libjansson-dev libcriterion-dev libevent-dev libsqlite3-dev libarchive-dev libcurl4-openssl-dev libssl-dev openssl ca-certificates clang libclang-rt-14-dev python3 python3-pytest python3-venv python3-setuptools python3-wheel bubblewrap hyperfine help2man lowdown mandoc zsh util-linux procps iproute2 passwd uidmap curl git docker-registry skopeo umoci btrfs-progs xfsprogs busybox-static"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# node and npm for the E2B suite (tests/e2b, the npm e2b SDK): any install
# will do (here they may come from NodeSource rather than Debian's nodejs and
# npm packages, which are only asked for when a command is missing). e2b
# 2.51.0 wants node >= 20.18.1.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	missing="$missing nodejs npm"
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "moat: missing Debian packages:$missing (run as root, or apt-get install them)" >&2
	exit 1
fi
echo "moat: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $missing >/dev/null
