#!/usr/bin/env bash
# Installs the pinned upstream JavaScript packages (package.json / package-lock.json) into
# node_modules beside this script, for crosscheck_test.go. Needs node and npm.
set -euo pipefail
cd "$(dirname "$0")"
npm install --no-audit --no-fund
node chunks.mjs --versions
