#!/usr/bin/env bash
# Gateway API quick start: the quick start's script on this directory. A GatewayClass
# naming Contour's controller, a Gateway with listeners on ports 80 and 443 (Envoy
# listens on their Contour container ports, 8080 and 8443: the Gateway's listeners and
# Contour's own are one), two HTTPRoutes. Edit the YAML files while it runs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
HTTP_PORT=8080 HTTPS_PORT=8443 READY_HOST=app.example.com exec "$here/../quickstart/run.sh" "$here"
