#!/usr/bin/env bash
# External authorization and global rate limiting: the quick start's script on this
# directory, with the two extension servers it needs (built from
# examples/extensions/servers.rs) started first: an ext_authz server on 127.0.0.1:18091
# allowing requests with `x-allow: yes`, and a rate limit service on 127.0.0.1:18092
# allowing 5 requests a minute per descriptor. HTTPProxy app.example.com uses both.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
echo "==> building the example's authorization and rate limit servers"
(cd "$repo" && cargo build --locked --quiet --example extension-servers)
target_dir="$(cd "$repo" && cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
"$target_dir/debug/examples/extension-servers" &
servers=$!
trap 'kill "$servers" 2>/dev/null || true' EXIT
READY_HOST=app.example.com "$here/../quickstart/run.sh" "$here"
