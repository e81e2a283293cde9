#!/usr/bin/env bash
# Benchmark oooi-dns against unbound with dnsperf, on loopback only.
#
# Both servers hold the same static records (oooi-dns from its config,
# unbound as local-data) and forward every other name to the same upstream (a
# third unbound serving example.org as local-data). The server under test is
# pinned to CPU 0, dnsperf and the upstream to CPU 1. Per round and server:
#   static     saturation QPS, then p50/p99 latency at half that rate
#              (measured by a low-rate probe beside the bulk load)
#   forwarded  the same with a warm cache (names the upstream answers)
# Rounds alternate the servers, so both see the same machine load.
#
# Usage: dns/bench/run.sh [path/to/release/oooi-dns] [seconds] [rounds]
# With BASE=path/to/another/oooi-dns, that binary is measured too (as
# "base", for before/after comparisons in the same run).
set -euo pipefail
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/oooi-dns}
SECS=${2:-10}
ROUNDS=${3:-2}
for t in dnsperf unbound taskset; do
  command -v "$t" >/dev/null || { echo "missing $t (tools/dev installs it)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "no oooi-dns binary at $BIN (cargo build --release -p oooi-dns)" >&2; exit 1; }

W=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

OOOI=127.0.0.20 UNBOUND=127.0.0.21 OOOI_BASE=127.0.0.22 UPSTREAM=127.0.0.23 PORT=25400 UPORT=25401
BASE=${BASE:-}
# With RT=1 and a base binary, runs saw no answer from any server (cause not
# found): compare against a base in the default mode only.
if [ -n "$BASE" ] && [ "${RT:-0}" = 1 ]; then
  echo "BASE is measured only without RT=1" >&2; exit 1
fi
# Other work on the machine (compilers) competes for both CPUs: as root, run
# everything measured at a higher priority, the same for every server.
# With RT=1 (root), servers run SCHED_FIFO and dnsperf SCHED_RR (lower, and
# round-robin so that its sending thread cannot starve its receiving one):
# a woken server then preempts the compilers at once, which is what the p99
# at half load measures. Without it, both are niced.
PRIO=() LOADPRIO=()
if [ "$(id -u)" = 0 ]; then
  if [ "${RT:-0}" = 1 ]; then PRIO=(chrt -f 10) LOADPRIO=(chrt -r 5)
  else PRIO=(nice -n -10) LOADPRIO=(nice -n -10); fi
fi

oooi_conf() { # listen address
  cat <<Y
upstreams:
  servers: ["$UPSTREAM:$UPORT"]
  max_cache_ttl: 3600
clusters:
  - {name: c1, base_domain: example.com, proxy: 192.0.2.4, apps_vip: 192.0.2.200}
views:
  - {name: vlan, kind: vlan, listen: ["$1:$PORT"]}
Y
}
oooi_conf $OOOI > "$W/oooi.yaml"
oooi_conf $OOOI_BASE > "$W/base.yaml"
unbound_conf() { # $1 = interface@port, then extra lines
  cat <<U
server:
  interface: $1
  do-daemonize: no
  use-syslog: no
  logfile: ""
  verbosity: 0
  chroot: ""
  username: ""
  pidfile: ""
  num-threads: 1
  module-config: "iterator"
  do-not-query-localhost: no
  access-control: 127.0.0.0/8 allow
  msg-cache-size: 16m
  rrset-cache-size: 16m
U
  shift
  printf '%s\n' "$@"
}
unbound_conf "$UNBOUND@$PORT" \
  '  local-zone: "c1.example.com." static' \
  '  local-data: "api.c1.example.com. 30 IN A 192.0.2.4"' \
  '  local-data: "oauth.c1.example.com. 30 IN A 192.0.2.4"' \
  '  local-zone: "apps.c1.example.com." redirect' \
  '  local-data: "apps.c1.example.com. 30 IN A 192.0.2.200"' \
  'forward-zone:' \
  '  name: "."' \
  "  forward-addr: $UPSTREAM@$UPORT" > "$W/unbound.conf"
unbound_conf "$UPSTREAM@$UPORT" \
  '  local-zone: "example.org." static' \
  '  local-data: "www1.example.org. 3600 IN A 203.0.113.1"' \
  '  local-data: "www2.example.org. 3600 IN A 203.0.113.2"' \
  '  local-data: "www3.example.org. 3600 IN A 203.0.113.3"' \
  '  local-data: "www4.example.org. 3600 IN A 203.0.113.4"' > "$W/upstream.conf"

printf 'api.c1.example.com A\noauth.c1.example.com A\nx.apps.c1.example.com A\napi.c1.example.com AAAA\n' > "$W/static.txt"
printf 'www1.example.org A\nwww2.example.org A\nwww3.example.org A\nwww4.example.org A\n' > "$W/forwarded.txt"

"${LOADPRIO[@]}" taskset -c 1 unbound -c "$W/upstream.conf" 2>/dev/null & PIDS+=($!)
RUST_LOG=warn "${PRIO[@]}" taskset -c 0 "$BIN" serve --config "$W/oooi.yaml" & PIDS+=($!)
"${PRIO[@]}" taskset -c 0 unbound -c "$W/unbound.conf" 2>/dev/null & PIDS+=($!)
TARGETS=("oooi-dns $OOOI" "unbound $UNBOUND")
if [ -n "$BASE" ]; then
  RUST_LOG=warn "${PRIO[@]}" taskset -c 0 "$BASE" serve --config "$W/base.yaml" & PIDS+=($!)
  TARGETS+=("base $OOOI_BASE")
fi
sleep 1

# dnsperf at saturation: prints the QPS.
saturate() { # server queryfile
  "${LOADPRIO[@]}" taskset -c 1 dnsperf -s "$1" -p $PORT -d "$2" -l "$SECS" -c 4 -q 200 2>/dev/null \
    | awk '/Queries per second/ {printf "%d", $4}'
}
# Latency at a fixed total rate: one dnsperf sends the bulk of it, a second
# one (PROBE queries per second, -v) reports each of its answers' latency,
# so that printing 100k lines a second does not inflate what is measured.
# Prints "qps p50 p99" (answers per second of both, latencies in ms).
PROBE=${PROBE:-2000}
# Outstanding queries allowed to the bulk sender: a large window lets it send
# in bursts that queue at the server, which the probe then measures.
WINDOW=${WINDOW:-50}
paced() { # server queryfile qps
  local bulk=$(( $3 > PROBE ? $3 - PROBE : 1 ))
  "${LOADPRIO[@]}" taskset -c 1 dnsperf -s "$1" -p $PORT -d "$2" -l "$SECS" -c 4 -q "$WINDOW" -Q "$bulk" 2>/dev/null \
    | awk '/Queries per second/ {printf "%d", $4}' > "$W/bulk" &
  local b=$!
  "${LOADPRIO[@]}" taskset -c 1 dnsperf -s "$1" -p $PORT -d "$2" -l "$SECS" -c 1 -q 20 -Q "$PROBE" -v 2>/dev/null \
    | awk '/^> / {print $NF * 1000}' | sort -n > "$W/probe"
  wait "$b"
  awk -v bulk="$(cat "$W/bulk")" '{v[NR]=$1} END {if (NR==0) {print "0 - -"; exit}
      p50=v[int(NR*0.50)>0?int(NR*0.50):1]; p99=v[int(NR*0.99)>0?int(NR*0.99):1];
      printf "%d %.3f %.3f", bulk + NR/'"$SECS"', p50, p99}' "$W/probe"
}

echo "load before: $(uptime)"
echo "priorities: servers ${PRIO[*]:-default}, dnsperf ${LOADPRIO[*]:-default}"
printf '%-6s %-9s %-8s %10s %10s %8s %8s\n' round path server sat_qps half_qps p50_ms p99_ms
for round in $(seq 1 "$ROUNDS"); do
  for path in static forwarded; do
    for target in "${TARGETS[@]}"; do
      set -- $target
      # Warm the forwarding caches (and the first-query paths).
      "${LOADPRIO[@]}" taskset -c 1 dnsperf -s "$2" -p $PORT -d "$W/$path.txt" -n 2 >/dev/null 2>&1 || true
      qps=$(saturate "$2" "$W/$path.txt")
      read -r half p50 p99 <<<"$(paced "$2" "$W/$path.txt" $(( ${qps:-2} / 2 )))"
      printf '%-6s %-9s %-8s %10s %10s %8s %8s\n' "$round" "$path" "$1" "$qps" "$half" "$p50" "$p99"
    done
  done
done
echo "load after: $(uptime)"
