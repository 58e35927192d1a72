#!/bin/sh
# The man pages, each generated from the one source it documents, so that
# they cannot drift from it: moat(1), moat-run(1) and moat-serve(8) from the
# built binaries' --help (help2man, plus the extra sections of
# docs/man/*.h2m), moat-policy(5) from docs/policy.md (lowdown).
#
#   sh scripts/man.sh BUILD_DIR OUT_DIR
set -eu
build=$(cd "$1" && pwd)
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/bin"
moat=$build/moat
version=$("$moat" version | sed 's/^moat //')
h2m() { help2man --no-info --version-string="$version" "$@"; }

# roff-safe verbatim text: backslashes, leading dots and quotes, hyphens
verbatim() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'; }

# moat(1): `moat --help`, then every other command's own --help (a
# command whose --help fails is left out rather than shown wrong)
inc=$out/moat-commands.h2m
printf '[COMMANDS]\n' > "$inc"
# (the commands as `moat --help` lists them, the same parse as completion.sh;
# run and serve have pages of their own)
cmds=$("$moat" --help | awk '
	/^commands:/ { on = 1; next }
	on && /^$/ { exit }
	on { sub(/^ +/, ""); split($0, col, /   +/); n = split(col[1], alt, / \| /)
	     for (i = 1; i <= n; i++) { split(alt[i], w, " "); print w[1] } }')
for cmd in $cmds; do
	case $cmd in run | serve | help | version) continue ;; esac
	if text=$("$moat" "$cmd" --help 2>/dev/null); then
		printf '.SS "moat %s"\n.nf\n' "$cmd" >> "$inc"
		printf '%s\n' "$text" | verbatim >> "$inc"
		printf '.fi\n' >> "$inc"
	fi
done
h2m -s 1 -n "an agent sandbox for Linux" -i "$inc" -i "$root/docs/man/moat.h2m" \
	-o "$out/moat.1" "$moat"

# moat-run(1): help2man names a page after its program, so a wrapper
printf '#!/bin/sh\nexec "%s" run "$@"\n' "$moat" > "$out/bin/moat-run"
chmod 755 "$out/bin/moat-run"
h2m -s 1 -n "run one command in a sandbox" -i "$root/docs/man/moat-run.h2m" \
	-o "$out/moat-run.1" "$out/bin/moat-run"

# moat-serve(8): the daemon's own --help
h2m -s 8 -n "long-lived sandboxes behind an HTTP API" -i "$root/docs/man/moat-serve.h2m" \
	-o "$out/moat-serve.8" "$build/moat-serve"

# moat-policy(5): docs/policy.md, its title turned into NAME/DESCRIPTION
{
	printf '# NAME\n\nmoat-policy - what a moat sandbox may see, write, reach and use\n\n'
	printf '# DESCRIPTION\n\n'
	sed '1{/^# /d}' "$root/docs/policy.md"
	printf '\n# SEE ALSO\n\nmoat(1), moat-run(1), moat-serve(8)\n'
} | lowdown -s -Tman -M title=moat-policy -M section=5 -M "source=moat $version" \
	-o "$out/moat-policy.5"
rm -rf "$out/bin" "$inc"
