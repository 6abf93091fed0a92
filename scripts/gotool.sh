#!/usr/bin/env bash
# gotool.sh MODULE/CMD VERSION — print the path of a pinned Go tool, installing it with
# `go install` into GOPATH/bin first when it is missing or was built from another version.
#   scripts/gotool.sh honnef.co/go/tools/cmd/staticcheck v0.8.2
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 IMPORT/PATH VERSION" >&2; exit 2; }
pkg=$1 version=$2
go=go
command -v go >/dev/null || go=/usr/local/go/bin/go
bin=$("$go" env GOPATH | cut -d: -f1)/bin/${pkg##*/}
if ! { [ -x "$bin" ] && "$go" version -m "$bin" 2>/dev/null | grep -qF "	$version	"; }; then
	echo "gotool: go install $pkg@$version" >&2
	# Outside the module, so the project's go.mod is neither read nor changed.
	(cd / && GOFLAGS=-buildvcs=false "$go" install "$pkg@$version") >&2
fi
echo "$bin"
