#!/usr/bin/env bash
# Benchmark oooi-dns against unbound serving the same static records, with
# dnsperf. Server pinned to CPU 0, load to CPU 1. Loopback only.
# Usage: dns/bench/run.sh [path/to/release/oooi-dns] [seconds]
set -euo pipefail
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/oooi-dns}
SECS=${2:-10}
for t in dnsperf unbound taskset; do
  command -v "$t" >/dev/null || { echo "missing $t (tools/dev installs it)" >&2; exit 1; }
done
W=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$W"' EXIT
cat > "$W/oooi.yaml" <<Y
clusters:
  - {name: c1, base_domain: example.com, proxy: 192.0.2.4, apps_vip: 192.0.2.200}
views:
  - {name: vlan, kind: vlan, listen: ["127.0.0.20:25400"]}
Y
cat > "$W/unbound.conf" <<U
server:
  interface: 127.0.0.21@25400
  do-daemonize: no
  use-syslog: no
  chroot: ""
  username: ""
  pidfile: ""
  num-threads: 1
  access-control: 127.0.0.0/8 allow
  local-zone: "c1.example.com." static
  local-data: "api.c1.example.com. 30 IN A 192.0.2.4"
  local-data: "oauth.c1.example.com. 30 IN A 192.0.2.4"
  local-zone: "apps.c1.example.com." redirect
  local-data: "apps.c1.example.com. 30 IN A 192.0.2.200"
U
printf 'api.c1.example.com A\noauth.c1.example.com A\nx.apps.c1.example.com A\napi.c1.example.com AAAA\n' > "$W/q.txt"
taskset -c 0 "$BIN" serve --config "$W/oooi.yaml" & sleep 1
taskset -c 0 unbound -c "$W/unbound.conf" & sleep 1
for target in "oooi-dns 127.0.0.20" "unbound 127.0.0.21"; do
  set -- $target
  echo "== $1 saturation"
  taskset -c 1 dnsperf -s "$2" -p 25400 -d "$W/q.txt" -l "$SECS" -c 4 -q 200 \
    | grep -E "Queries per second|Average Latency|Latency StdDev|Queries lost"
done
