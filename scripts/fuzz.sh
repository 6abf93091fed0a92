#!/usr/bin/env bash
# fuzz.sh FUZZTIME [PACKAGES...] — run every Fuzz target of the packages (default ./...) for
# FUZZTIME each, one after the other (go test -fuzz takes one target at a time). Targets are
# discovered with `go test -list '^Fuzz'`. Fails at the end if any target failed; a failing
# input is written by go test under the package's testdata/fuzz/ for you to commit with the fix.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 FUZZTIME [PACKAGES...]" >&2; exit 2; }
fuzztime=$1
shift
[ $# -gt 0 ] || set -- ./...
go=go
command -v go >/dev/null || go=/usr/local/go/bin/go

# `go test -list` prints a package's matching names, then "ok <pkg> <time>".
targets=$("$go" test -run '^$' -list '^Fuzz' "$@" | awk '
	/^Fuzz/ { names[n++] = $1; next }
	/^ok / { for (i = 0; i < n; i++) print $2, names[i]; n = 0; next }
	/^(FAIL|\?)/ { n = 0 }')
if [ -z "$targets" ]; then
	echo "fuzz: no Fuzz targets found"
	exit 0
fi

failed=()
count=0
while read -r pkg name; do
	count=$((count + 1))
	echo "fuzz: $pkg $name ($fuzztime)"
	if ! "$go" test -run '^$' -fuzz "^$name\$" -fuzztime "$fuzztime" "$pkg"; then
		failed+=("$pkg $name")
	fi
done <<<"$targets"

echo "fuzz: $count targets, ${#failed[@]} failed"
if [ ${#failed[@]} -gt 0 ]; then
	printf 'fuzz: FAILED %s\n' "${failed[@]}"
	exit 1
fi
