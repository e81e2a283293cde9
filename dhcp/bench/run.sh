#!/usr/bin/env bash
# Benchmark oooi-dhcp against Kea (kea-dhcp4, memfile) with perfdhcp: full
# DORA exchanges, relayed (perfdhcp sets giaddr), across a veth pair between
# two network namespaces this script creates and removes. Same /16 pool for
# both servers; server pinned to CPU 0, perfdhcp to CPU 1.
#
# Usage: dhcp/bench/run.sh [path/to/release/oooi-dhcp] [seconds] [offered rate/s]
# Needs root, perfdhcp (kea-admin), kea-dhcp4-server, taskset.
set -euo pipefail
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/oooi-dhcp}
SECS=${2:-10}
RATE=${3:-20000}
for t in perfdhcp kea-dhcp4 taskset ip; do
  command -v "$t" >/dev/null || { echo "missing $t (tools/dev setup installs it)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "build it first: cargo build --release -p oooi-dhcp" >&2; exit 1; }

S="odb$$s"; C="odb$$c"
# Lease files live on the real disk (not tmpfs), so fsync costs what it costs.
W=$(mktemp -d /var/tmp/oooi-dhcp-bench.XXXXXX)
# OOOI_BENCH_DATA_DIR puts the lease log elsewhere (e.g. tmpfs, to see what fsync costs).
DATA=${OOOI_BENCH_DATA_DIR:-$W/oooi-data}
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  ip netns del "$S" 2>/dev/null || true
  ip netns del "$C" 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

ip netns add "$S"; ip netns add "$C"
ip -n "$S" link set lo up; ip -n "$C" link set lo up
ip -n "$S" link add vs type veth peer name vc netns "$C"
ip -n "$S" addr add 10.20.0.1/16 dev vs; ip -n "$S" link set vs up
ip -n "$C" addr add 10.20.0.2/16 dev vc; ip -n "$C" link set vc up

cat > "$W/oooi.yaml" <<Y
interface: vs
server_ip: 10.20.0.1
subnet: 10.20.0.0/16
gateway: 10.20.0.254
range: { start: 10.20.1.0, end: 10.20.255.254 }
dns_servers: [10.20.0.3]
domain: cluster.example
lease_seconds: 3600
Y
mkdir -p "$W/kea"
cat > "$W/kea.json" <<K
{ "Dhcp4": {
  "interfaces-config": { "interfaces": ["vs"], "dhcp-socket-type": "udp" },
  "lease-database": { "type": "memfile", "persist": true, "lfc-interval": 0,
                      "name": "$W/kea/leases4.csv" },
  "valid-lifetime": 3600, "renew-timer": 1800, "rebind-timer": 3150,
  "subnet4": [ { "subnet": "10.20.0.0/16", "id": 1,
                 "pools": [ { "pool": "10.20.1.0 - 10.20.255.254" } ],
                 "option-data": [ { "name": "routers", "data": "10.20.0.254" },
                                  { "name": "domain-name-servers", "data": "10.20.0.3" },
                                  { "name": "domain-name", "data": "cluster.example" } ] } ],
  "loggers": [ { "name": "kea-dhcp4", "severity": "WARN",
                 "output_options": [ { "output": "$W/kea/kea.log" } ] } ]
} }
K

udp_rcvbuf_errors() {
  # RcvbufErrors of the client namespace: replies lost because perfdhcp's
  # socket buffer was full (perfdhcp itself falling behind).
  ip netns exec "$C" awk '/^Udp:/ { if (h) { for (i = 1; i <= NF; i++) if (n[i] == "RcvbufErrors") print $i } else { for (i = 1; i <= NF; i++) n[i] = $i; h = 1 } }' /proc/net/snmp
}

run_perfdhcp() {
  local before; before=$(udp_rcvbuf_errors)
  # -R: simulated clients (random MACs), -d 1: a reply later than 1 s is a drop.
  taskset -c 1 ip netns exec "$C" perfdhcp -4 ${PERFDHCP_OPTS:-} -l vc -r "$RATE" -R 60000 -p "$SECS" -d 1 10.20.0.1 \
    > "$W/$1.perfdhcp" 2>&1 || true
  grep -E "^Rate:|drops:|sent packets|received packets|orphans|unordered|rejected|avg delay" "$W/$1.perfdhcp" \
    || cat "$W/$1.perfdhcp"
  echo "replies lost in perfdhcp's socket buffer: $(( $(udp_rcvbuf_errors) - before ))"
}

echo "== load: $(uptime)"
echo "== oooi-dhcp (group commit: records of a batch fdatasync'ed once before any ACK of the batch)"
RUST_LOG=warn taskset -c 0 ip netns exec "$S" "$BIN" serve --config "$W/oooi.yaml" \
  --data-dir "$DATA" --metrics-addr 127.0.0.1:9067 > "$W/oooi.log" 2>&1 &
PIDS+=($!); sleep 1
run_perfdhcp oooi
ip netns exec "$S" python3 - <<'P' || true
import urllib.request
m = urllib.request.urlopen("http://127.0.0.1:9067/metrics", timeout=2).read().decode()
for l in m.splitlines():
    if l.startswith(("oooi_dhcp_store_sync_duration_seconds_sum", "oooi_dhcp_store_sync_duration_seconds_count",
                     "oooi_dhcp_store_batch_records_sum", "oooi_dhcp_store_batch_records_count",
                     "oooi_dhcp_leases_active ", "oooi_dhcp_send_errors_total", "oooi_dhcp_packets_dropped", "oooi_dhcp_messages_sent_total")):
        print("   ", l)
P
kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true; PIDS=()
echo "   leases in the store: $("$BIN" leases --data-dir "$DATA" | tail -n +2 | wc -l)"

echo "== kea-dhcp4 $(kea-dhcp4 -V | head -1) (memfile, persist: appended to a CSV, no fsync)"
KEA_PIDFILE_DIR="$W/kea" KEA_LOCKFILE_DIR="$W/kea" taskset -c 0 \
  ip netns exec "$S" kea-dhcp4 -c "$W/kea.json" > "$W/kea/stdout.log" 2>&1 &
PIDS+=($!); sleep 2
run_perfdhcp kea
kill "${PIDS[0]}"; wait "${PIDS[0]}" 2>/dev/null || true; PIDS=()
echo "   leases in the CSV: $(grep -c '^10\.' "$W/kea/leases4.csv" || true)"
echo "== load after: $(uptime)"
