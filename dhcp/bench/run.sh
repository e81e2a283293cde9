#!/usr/bin/env bash
# Benchmark oooi-dhcp against Kea (kea-dhcp4, memfile) with perfdhcp: full
# DORA exchanges, relayed (perfdhcp sets giaddr), in network namespaces this
# script creates and removes. Same /16 pool for every server; servers and
# perfdhcp pinned to different CPUs (see Layout). oooi-dhcp runs once per
# durability mode (default: fsync, then write), then as a pair, then Kea; a
# summary table at the end gives leases/s at saturation, drops and the
# guarantee of each.
#
# One topology for every row: perfdhcp's namespace holds a bridge with two
# legs, one to namespace A and one to namespace B (the VLAN), and A and B
# are joined by a separate link standing in for the pod network that
# carries the pair API. perfdhcp broadcasts (relay-style: it sets giaddr and
# listens on port 67). The pair runs its two servers in A and B; every other
# row (one oooi-dhcp, Kea) runs its server in A while B's leg stays up with
# nothing listening. Why every row: perfdhcp's CPU is the bottleneck at
# saturation, and it also runs the softirq that delivers each broadcast
# through the bridge to both legs. Measured as before (one server reached by
# unicast over one veth, the pair by broadcast on the bridge), perfdhcp's CPU
# did more per request in the pair row than in the others, so the rows
# measured different loads generators, not different servers.
#
# Kea receives the broadcasts on its raw socket (`dhcp-socket-type: raw`,
# its default and its mode for clients on the link; a UDP socket of Kea's is
# bound to the interface address and never sees a broadcast); oooi-dhcp on
# its UDP socket bound to 0.0.0.0:67.
#
# The pair: two oooi-dhcp servers (--durability fsync, primary and
# secondary), both see every request and each answers its half (RFC 3074
# hash). Each lease is written on the server that
# decided it and sent to the other at once (batched); it is ACKed only when
# both have fdatasynced it. Both servers share the one server's CPU (PAIR_CPUS overrides),
# so the comparison is at equal CPU. After the run both lease stores are
# compared: every lease must be in both.
#
# perfdhcp's receive socket: perfdhcp stands in for 60,000 clients with one
# socket and has no option for its buffer, so it gets net.core.rmem_default
# (212,992 bytes on Debian), a few milliseconds of replies at saturation:
# the bench would measure that buffer, not the servers. With
# --client-rcvbuf BYTES (default 4M) the script raises rmem_default while
# perfdhcp opens its socket (about 0.1 s) and restores it at once, on every
# exit path too (only a SIGKILL in that window could leave it raised). The
# sysctl is global: a network namespace only shows the host's value,
# read-only. The servers' sockets are open before that, so they keep their
# own size (oooi-dhcp asks for 4 MiB, Kea takes the system default). Every
# row (one server, the pair, Kea) gets the same buffer; the report prints it.
# `--client-rcvbuf system` leaves the system default.
#
# Renewals are in the mix: perfdhcp renews the leases it got at
# RENEW_RATE/s (default a fifth of the offered rate) beside the new DORAs.
#
# The conflict probe (an ICMP echo before offering an address with no
# binding of its client): every other row runs with `probe_timeout_ms: 0`;
# the `probe` mode is the `fsync` one with the probe on (500 ms, the
# namespace's net.ipv4.ping_group_range set as the pod sets it). perfdhcp's
# simulated clients are all new and answer no ping, so every offer waits
# the whole timeout: the row shows what the probe costs per new lease
# (added delay, server CPU, rate).
#
# Usage: dhcp/bench/run.sh [path/to/release/oooi-dhcp] [--client-rcvbuf BYTES|system]
#                          [seconds] [offered rate/s]
#        BYTES takes K, M suffixes (1024-based); 0 is the same as `system`.
# Env:   MODES="fsync write probe pair pair-write"  oooi-dhcp modes to run
#                              (durability modes of one server, one server
#                              probing, the pair syncing and the pair
#                              writing: the last is Kea memfile's guarantee
#                              and more, since every ACKed lease is on both
#                              servers)
#        RENEW_RATE=N          renewals per second perfdhcp sends (0: none)
#        PAIR_CPUS="A B"       CPUs of the two pair servers (default: both
#                              on the server CPU)
#        PERFDHCP_OPTS=...     extra perfdhcp options (e.g. "-g multi")
#        OOOI_BENCH_DATA_DIR   lease log directory (default: on the real disk)
#        BENCH_PRIORITY=0      run at normal priority (see below)
#        SERVER_CPU, CLIENT_CPU  CPUs of the server and perfdhcp (default: the
#                              server on the CPU taking the lease disk's
#                              interrupts, perfdhcp on another; see below)
# Needs root, perfdhcp (kea-admin), kea-dhcp4-server, taskset, setsid.
set -euo pipefail
CLIENT_RCVBUF=4M
ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --client-rcvbuf) [ $# -ge 2 ] || { echo "--client-rcvbuf needs a value (bytes, or system)" >&2; exit 2; }
      CLIENT_RCVBUF=$2; shift 2 ;;
    --client-rcvbuf=*) CLIENT_RCVBUF=${1#*=}; shift ;;
    -*) echo "unknown option $1 (known: --client-rcvbuf BYTES|system)" >&2; exit 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
set -- ${ARGS[@]+"${ARGS[@]}"}
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/oooi-dhcp}
SECS=${2:-10}
RATE=${3:-20000}
# The receive buffer perfdhcp's socket gets (bytes); empty: the system default.
case $CLIENT_RCVBUF in
  system|0) RCVBUF_BYTES="" ;;
  *) RCVBUF_BYTES=$(numfmt --from=iec "$CLIENT_RCVBUF" 2>/dev/null) && [ "$RCVBUF_BYTES" -ge 4608 ] 2>/dev/null || {
       echo "--client-rcvbuf: '$CLIENT_RCVBUF' is not a size of at least 4608 bytes (e.g. 4194304, 4M) or system" >&2; exit 2; } ;;
esac
MODES=${MODES:-fsync write probe pair pair-write}
RENEW_RATE=${RENEW_RATE:-$((RATE / 5))}
for t in perfdhcp kea-dhcp4 taskset setsid ip; do
  command -v "$t" >/dev/null || { echo "missing $t (tools/dev setup installs it)" >&2; exit 1; }
done
[ -x "$BIN" ] || { echo "build it first: cargo build --release -p oooi-dhcp" >&2; exit 1; }

# The servers' namespaces (A: every server; B: the pair's second one) and
# perfdhcp's (with the bridge).
PA="odb$$a"; PB="odb$$b"; PC="odb$$p"
# Lease files live on the real disk (not tmpfs), so fsync costs what it costs.
W=$(mktemp -d /var/tmp/oooi-dhcp-bench.XXXXXX)

# net.core.rmem_default is raised only while perfdhcp opens its socket (see
# the top). RMEM_SAVED holds the system value while ours is in place; it is
# set before the write, so a signal at any point still restores it.
RMEM=/proc/sys/net/core/rmem_default
RMEM_SYSTEM=$(cat "$RMEM")
RMEM_SAVED=""
rmem_raise() {
  [ -n "$RCVBUF_BYTES" ] || return 0
  RMEM_SAVED=$(cat "$RMEM")
  echo "$RCVBUF_BYTES" > "$RMEM"
}
rmem_restore() {
  [ -n "$RMEM_SAVED" ] || return 0
  echo "$RMEM_SAVED" > "$RMEM"
  RMEM_SAVED=""
}

cleanup() {
  rmem_restore || echo "could not restore net.core.rmem_default to $RMEM_SAVED" >&2
  stop "$W/server.pid" >/dev/null 2>&1 || true
  stop "$W/server-b.pid" >/dev/null 2>&1 || true
  stop "$W/perfdhcp.pid" >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  for n in "$PA" "$PB" "$PC"; do ip netns del "$n" 2>/dev/null || true; done
  [ -n "${BENCH_KEEP:-}" ] && { cat "$W"/out/*.log >&2; }; rm -rf "$W"
}
trap cleanup EXIT
# Ctrl-C, kill and a closed terminal end the script through its EXIT trap.
trap 'exit 130' INT; trap 'exit 143' TERM; trap 'exit 129' HUP

# On a machine shared with builds, the scheduler's autogroups share the CPUs
# per session whatever a process's nice value, so the load generator and the
# server would get a varying fraction of their core. Each measured process
# (server and perfdhcp alike, Kea and oooi alike) runs in its own session
# whose autogroup is set to nice -15, so background jobs disturb the run
# little. On an idle machine this changes nothing.
# prio PIDFILE CMD...: runs CMD (which keeps the PID, every wrapper execs)
# and writes its PID to PIDFILE (setsid may fork, so $! is not it).
prio() {
  local pf=$1; shift
  if [ "${BENCH_PRIORITY:-1}" = 0 ]; then
    sh -c 'echo $$ > "$0"; exec "$@"' "$pf" "$@"
  else
    setsid -w sh -c 'echo $$ > "$0"; echo -15 > /proc/self/autogroup 2>/dev/null || true; exec nice -n -15 "$@"' "$pf" "$@"
  fi
}

# stop PIDFILE: stops the server started under prio and waits until it is gone.
stop() {
  local pid; pid=$(cat "$1" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || echo "   (the server had already exited: see its log)"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
}

# The CPU that takes the interrupts of the disk holding $1 (empty if unknown).
disk_irq_cpu() {
  local src dev pk name
  src=$(df --output=source "$1" 2>/dev/null | tail -1) || return 0
  dev=$(basename "$src")
  pk=$(lsblk -no pkname "$src" 2>/dev/null | head -1 || true); [ -n "$pk" ] && dev=$pk
  name=$(basename "$(readlink -f "/sys/block/$dev/device" 2>/dev/null)" 2>/dev/null || true)
  [ -n "$name" ] && [ "$name" != device ] || return 0
  awk -v n="$name" 'NR == 1 { ncpu = NF; next }
    index($0, n "-") || index($0, n "q") { for (i = 2; i <= ncpu + 1; i++) c[i - 2] += $i }
    END { best = 0; for (k in c) if (c[k] > best) { best = c[k]; cpu = k }; if (best > 0) print cpu }' /proc/interrupts
}

# Layout: the server runs on the CPU that takes the lease disk's interrupts
# and perfdhcp on another. With perfdhcp on the disk's CPU, the completion
# interrupts of our fdatasyncs steal the load generator's time: measured
# here, the fsync mode gave 11,600/s that way and 13,700-14,500/s the other
# way round, while Kea (no syncs) gave the same either way.
DATA_PARENT=$(dirname "${OOOI_BENCH_DATA_DIR:-$W/x}")
mkdir -p "$DATA_PARENT"
SERVER_CPU=${SERVER_CPU:-$(disk_irq_cpu "$DATA_PARENT")}
SERVER_CPU=${SERVER_CPU:-0}
if [ -z "${CLIENT_CPU:-}" ]; then
  CLIENT_CPU=0; [ "$SERVER_CPU" = 0 ] && CLIENT_CPU=1
fi

# The topology of every row (see the top).
for n in "$PA" "$PB" "$PC"; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip -n "$PC" link add br0 type bridge; ip -n "$PC" link set br0 up
ip -n "$PC" addr add 10.20.0.2/16 dev br0
ip -n "$PA" link add vs type veth peer name va netns "$PC"
ip -n "$PB" link add vs type veth peer name vb netns "$PC"
for v in va vb; do ip -n "$PC" link set "$v" master br0; ip -n "$PC" link set "$v" up; done
ip -n "$PA" addr add 10.20.0.1/16 dev vs; ip -n "$PA" link set vs up
ip -n "$PB" addr add 10.20.0.4/16 dev vs; ip -n "$PB" link set vs up
# The pod network: a link of its own, never the VLAN.
ip -n "$PA" link add pod type veth peer name pod netns "$PB"
ip -n "$PA" addr add 10.30.0.1/30 dev pod; ip -n "$PA" link set pod up
ip -n "$PB" addr add 10.30.0.2/30 dev pod; ip -n "$PB" link set pod up

mkdir -p "$W/etc" "$W/kea" "$W/out"
cat > "$W/etc/oooi.yaml" <<Y
interface: vs
server_ip: 10.20.0.1
subnet: 10.20.0.0/16
gateway: 10.20.0.254
range: { start: 10.20.1.0, end: 10.20.255.254 }
dns_servers: [10.20.0.3]
domain: cluster.example
lease_seconds: 3600
probe_timeout_ms: 0
Y
sed 's/^probe_timeout_ms: .*/probe_timeout_ms: 500/' "$W/etc/oooi.yaml" > "$W/etc/oooi-probe.yaml"
cat > "$W/etc/kea.json" <<K
{ "Dhcp4": {
  "interfaces-config": { "interfaces": ["vs"], "dhcp-socket-type": "raw" },
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

udp_counter() {
  # A UDP counter ($2) of the client namespace ($1).
  ip netns exec "$1" awk -v c="$2" '/^Udp:/ { if (h) { for (i = 1; i <= NF; i++) if (n[i] == c) print $i } else { for (i = 1; i <= NF; i++) n[i] = $i; h = 1 } }' /proc/net/snmp
}
udp_rcvbuf_errors() {
  # Replies lost because perfdhcp's socket buffer was full (perfdhcp itself
  # falling behind).
  udp_counter "$1" RcvbufErrors
}

# proc_ticks PIDFILE...: CPU time (user + system, clock ticks) the
# processes have used so far, threads included.
proc_ticks() {
  local f pid t=0 x
  for f in "$@"; do
    pid=$(cat "$f" 2>/dev/null) || continue
    x=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null) || continue
    t=$((t + x))
  done
  echo "$t"
}

# cpu_ticks CPU: busy and softirq clock ticks of one CPU so far.
cpu_ticks() {
  awk -v c="cpu$1" '$1 == c { print $2 + $3 + $4 + $7 + $8 + $9, $8 }' /proc/stat
}

# client_rcvbuf NS PID: the receive buffer (bytes, `ss` rb) of perfdhcp's
# socket on port 67 in NS once it is open; empty if none opens within about
# 5 s or PID (perfdhcp's launcher) ends first.
client_rcvbuf() {
  local rb
  for _ in $(seq 250); do
    rb=$(ip netns exec "$1" ss -uanm 'sport = :67' 2>/dev/null | sed -n 's/.*skmem:(.*,rb\([0-9]*\),.*/\1/p' | head -1)
    [ -n "$rb" ] && { echo "$rb"; return 0; }
    kill -0 "$2" 2>/dev/null || return 0
    sleep 0.01
  done
}

SUMMARY=()
# run_perfdhcp NAME GUARANTEE: runs perfdhcp, prints its report, adds a
# summary row. perfdhcp broadcasts on the bridge (see the top).
# SERVER_PIDFILES names the measured servers' PID files (for their CPU time).
run_perfdhcp() {
  local before lost out="$W/out/$1.perfdhcp" ns=$PC
  local hz t0 t1 s0 s1 c0 c1 pids
  read -r -a pids <<<"${SERVER_PIDFILES:-$W/server.pid}"
  hz=$(getconf CLK_TCK)
  before=$(udp_rcvbuf_errors "$ns"); local in0; in0=$(udp_counter "$ns" InDatagrams)
  t0=$(proc_ticks "${pids[@]}"); read -r s0 s0i <<<"$(cpu_ticks "$SERVER_CPU")"; read -r c0 c0i <<<"$(cpu_ticks "$CLIENT_CPU")"
  # Started in the background, so that rmem_default goes back as soon as
  # perfdhcp's socket exists.
  # -R: simulated clients (random MACs), -d 1: a reply later than 1 s is a drop.
  local perf rb
  rmem_raise
  # shellcheck disable=SC2086
  local renew=""; [ "$RENEW_RATE" -gt 0 ] && renew="-f $RENEW_RATE"
  # shellcheck disable=SC2086
  prio "$W/perfdhcp.pid" taskset -c "$CLIENT_CPU" ip netns exec "$ns" perfdhcp -4 ${PERFDHCP_OPTS:-} -l br0 -r "$RATE" $renew -R 60000 -p "$SECS" -d 1 \
    > "$out" 2>&1 &
  perf=$!
  rb=$(client_rcvbuf "$ns" "$perf")
  rmem_restore
  wait "$perf" || true
  lost=$(( $(udp_rcvbuf_errors "$ns") - before ))
  t1=$(proc_ticks "${pids[@]}"); read -r s1 s1i <<<"$(cpu_ticks "$SERVER_CPU")"; read -r c1 c1i <<<"$(cpu_ticks "$CLIENT_CPU")"
  grep -E "^Rate:|drops:|sent packets|received packets|orphans|rejected|avg delay" "$out" || cat "$out"
  echo "   replies lost in perfdhcp's socket buffer (${rb:-?} bytes): $lost; datagrams perfdhcp read: $(( $(udp_counter "$ns" InDatagrams) - in0 ))"
  local rate do_drops ra_drops
  rate=$(awk '/^Rate:/ { printf "%d", $2 }' "$out")
  # CPU: the servers' own time per completed lease, and how busy each CPU
  # was (softirq apart: packet delivery between the namespaces).
  awk -v t=$((t1 - t0)) -v hz="$hz" -v r="${rate:-0}" -v secs="$SECS" \
      -v sb=$((s1 - s0)) -v ss=$((s1i - s0i)) -v cb=$((c1 - c0)) -v cs=$((c1i - c0i)) \
      -v sc="$SERVER_CPU" -v cc="$CLIENT_CPU" 'BEGIN {
    n = r * secs
    printf "   cpu: servers %.2f s (%.0f us per lease); CPU %s (servers) %.0f %% busy, %.0f %% softirq; CPU %s (perfdhcp) %.0f %% busy, %.0f %% softirq\n",
      t / hz, (n > 0 ? 1e6 * t / hz / n : 0), sc, 100 * sb / hz / secs, 100 * ss / hz / secs, cc, 100 * cb / hz / secs, 100 * cs / hz / secs
  }'
  do_drops=$(awk '/drops:/ { n++; if (n == 1) print $2 }' "$out")
  ra_drops=$(awk '/drops:/ { n++; if (n == 2) print $2 }' "$out")
  # The third exchange perfdhcp reports is the renewal (REQUEST-ACK of a
  # bound client): its received packets per second.
  local renews
  renews=$(awk -v s="$SECS" '/received packets:/ { n++; if (n == 3) printf "%d", $3 / s }' "$out")
  SUMMARY+=("$(printf '%-16s %10s %10s %10s %10s %12s %10s  %s' "$1" "${rate:-?}" "${renews:--}" "${do_drops:-?}" "${ra_drops:-?}" "$lost" "${rb:-?}" "$2")")
}

# server_metrics NS [pair]: the server's counters (replies, syncs; with
# `pair`, the lease updates between the two servers).
server_metrics() {
  ip netns exec "$1" python3 - "${2:-}" <<'P' || true
import sys, urllib.request
m = urllib.request.urlopen("http://127.0.0.1:9067/metrics", timeout=2).read().decode()
v = {}
for l in m.splitlines():
    if l and not l.startswith("#"):
        k, _, x = l.rpartition(" ")
        v[k] = float(x)
g = lambda k: v.get(k, 0.0)
syncs = g("oooi_dhcp_store_sync_duration_seconds_count")
print("   server: %d offers, %d acks sent; %d fdatasyncs, %.1f records and %.2f ms each; %d send errors"
      % (g('oooi_dhcp_messages_sent_total{type="offer"}'), g('oooi_dhcp_messages_sent_total{type="ack"}'),
         syncs, g("oooi_dhcp_store_batch_records_sum") / max(syncs, 1),
         1000 * g("oooi_dhcp_store_sync_duration_seconds_sum") / max(syncs, 1), g("oooi_dhcp_send_errors_total")))
probes = g("oooi_dhcp_probes_total")
if probes or g("oooi_dhcp_probe_errors_total"):
    waited = g("oooi_dhcp_probe_delay_seconds_count")
    print("   probe: %d ICMP echoes, %d answered, %d not sent (offered unprobed); %d offers waited %.0f ms on average"
          % (probes, g("oooi_dhcp_probe_conflicts_total"), g("oooi_dhcp_probe_errors_total"),
             waited, 1000 * g("oooi_dhcp_probe_delay_seconds_sum") / max(waited, 1)))
if sys.argv[1] == "pair":
    print("   pair: state %d (1 load balancing); %d lease records sent, %d received, %d unsent, %d update errors, %d takeovers; %d renewals ACKed lazily"
          % (g("oooi_dhcp_pair_state"), g("oooi_dhcp_pair_updates_sent_total"), g("oooi_dhcp_pair_updates_received_total"),
             g("oooi_dhcp_pair_updates_unsent_total"), g("oooi_dhcp_pair_update_errors_total"), g("oooi_dhcp_pair_takeovers_total"),
             g("oooi_dhcp_pair_lazy_acks_total")))
P
}

# pair_config ME OTHER ROLE: the config of one pair server.
pair_config() {
  sed "s/^server_ip: .*/server_ip: $1/" "$W/etc/oooi.yaml"
  cat <<Y
peer:
  role: $3
  server_ip: $2
  api: "$4"
  listen: "0.0.0.0:9068"
  token_file: $W/etc/pair-token
Y
}

# run_pair DURABILITY: the pair (see the top), perfdhcp broadcasting on the
# bridge, both servers with --durability DURABILITY (fsync or write).
run_pair() {
  local durability=$1 guarantee row="oooi-dhcp pair"
  case $durability in
    fsync) guarantee="ACK after fdatasync on both servers: survives kill -9 and power loss of either" ;;
    write) guarantee="ACK after write() on both servers: survives kill -9 of either and power loss of one (the other holds every ACKed lease)"
           row="oooi pair write" ;;
  esac
  local a_cpu b_cpu da="${OOOI_BENCH_DATA_DIR:-$W/oooi-data}-pair-$durability-a" db="${OOOI_BENCH_DATA_DIR:-$W/oooi-data}-pair-$durability-b"
  read -r a_cpu b_cpu <<<"${PAIR_CPUS:-$SERVER_CPU $SERVER_CPU}"
  echo "== oooi-dhcp pair (--durability $durability, servers on CPUs $a_cpu and $b_cpu): $guarantee"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$W/etc/pair-token"
  pair_config 10.20.0.1 10.20.0.4 primary 10.30.0.2:9068 > "$W/etc/pair-a.yaml"
  pair_config 10.20.0.4 10.20.0.1 secondary 10.30.0.1:9068 > "$W/etc/pair-b.yaml"
  RUST_LOG=warn prio "$W/server.pid" taskset -c "$a_cpu" ip netns exec "$PA" "$BIN" serve --config "$W/etc/pair-a.yaml" \
    --data-dir "$da" --durability "$durability" --metrics-addr 127.0.0.1:9067 --pair-listen 10.30.0.1:9068 > "$W/out/oooi-pair-a.log" 2>&1 &
  RUST_LOG=warn prio "$W/server-b.pid" taskset -c "$b_cpu" ip netns exec "$PB" "$BIN" serve --config "$W/etc/pair-b.yaml" \
    --data-dir "$db" --durability "$durability" --metrics-addr 127.0.0.1:9067 --pair-listen 10.30.0.2:9068 > "$W/out/oooi-pair-b.log" 2>&1 &
  # Both must be load balancing (synced with each other) before the burst.
  # (`|| true`: a server not listening yet fails curl, and set -e would end
  # the run silently.)
  local n state_a state_b
  for n in $(seq 100); do
    state_a=$(ip netns exec "$PA" curl -s http://127.0.0.1:9067/metrics | awk '/^oooi_dhcp_pair_state / { print $2 }' || true)
    state_b=$(ip netns exec "$PB" curl -s http://127.0.0.1:9067/metrics | awk '/^oooi_dhcp_pair_state / { print $2 }' || true)
    [ "$state_a" = 1 ] && [ "$state_b" = 1 ] && break
    sleep 0.1
  done
  [ "$state_a" = 1 ] && [ "$state_b" = 1 ] || { echo "the pair did not reach load balancing (states: ${state_a:-?} ${state_b:-?})" >&2; cat "$W"/out/oooi-pair-*.log >&2; exit 1; }
  SERVER_PIDFILES="$W/server.pid $W/server-b.pid" run_perfdhcp "$row" "$guarantee"
  echo "   server A (primary):"; server_metrics "$PA" pair
  echo "   server B (secondary):"; server_metrics "$PB" pair
  stop "$W/server.pid"; stop "$W/server-b.pid"
  "$BIN" leases --data-dir "$da" | tail -n +2 | awk '{ print $1, $2 }' | sort > "$W/out/pair-a.leases"
  "$BIN" leases --data-dir "$db" | tail -n +2 | awk '{ print $1, $2 }' | sort > "$W/out/pair-b.leases"
  local in_a in_b both held_twice
  in_a=$(wc -l < "$W/out/pair-a.leases"); in_b=$(wc -l < "$W/out/pair-b.leases")
  both=$(comm -12 "$W/out/pair-a.leases" "$W/out/pair-b.leases" | wc -l)
  held_twice=$(sort -u "$W/out/pair-a.leases" "$W/out/pair-b.leases" | awk '{ print $1 }' | uniq -d | wc -l)
  echo "   leases: $in_a in A's store, $in_b in B's, $both in both; addresses held by two clients: $held_twice"
  if [ "$in_a" != "$both" ] || [ "$in_b" != "$both" ] || [ "$held_twice" != 0 ]; then
    echo "   FAILED: every lease must be in both stores, no address held twice" >&2
    PAIR_FAILED=1
  fi
  rm -rf "$da" "$db"
}

echo "== load: $(uptime)"
echo "== offered: $RATE DISCOVER/s and $RENEW_RATE renewals/s for $SECS s, 60000 simulated clients, perfdhcp $(perfdhcp -v 2>&1 | head -1)"
if [ -n "$RCVBUF_BYTES" ]; then
  echo "== perfdhcp's receive buffer: $RCVBUF_BYTES bytes (--client-rcvbuf $CLIENT_RCVBUF): net.core.rmem_default (global, now $RMEM_SYSTEM) is raised while perfdhcp opens its socket and restored at once"
else
  echo "== perfdhcp's receive buffer: the system default, net.core.rmem_default = $RMEM_SYSTEM bytes (--client-rcvbuf system)"
fi
echo "== servers on CPU $SERVER_CPU (the lease disk's interrupts: CPU $(disk_irq_cpu "$DATA_PARENT")), perfdhcp on CPU $CLIENT_CPU"
PAIR_FAILED=0
for mode in $MODES; do
  data="${OOOI_BENCH_DATA_DIR:-$W/oooi-data}-$mode"
  conf="$W/etc/oooi.yaml"; durability=$mode
  case $mode in
    fsync) guarantee="ACK after fdatasync (group commit): survives kill -9 and power loss" ;;
    probe) guarantee="as fsync, and an ICMP echo (500 ms) before each offer of an address new to its client"
           conf="$W/etc/oooi-probe.yaml"; durability=fsync
           ip netns exec "$PA" sysctl -q -w net.ipv4.ping_group_range="0 2147483647" ;;
    write) guarantee="ACK after write(): survives kill -9, not power loss (= Kea memfile)" ;;
    pair) run_pair fsync; continue ;;
    pair-write) run_pair write; continue ;;
    *) echo "unknown mode $mode" >&2; exit 1 ;;
  esac
  echo "== oooi-dhcp $mode (--durability $durability): $guarantee"
  RUST_LOG=warn prio "$W/server.pid" taskset -c "$SERVER_CPU" ip netns exec "$PA" "$BIN" serve --config "$conf" \
    --data-dir "$data" --durability "$durability" --metrics-addr 127.0.0.1:9067 > "$W/out/oooi-$mode.log" 2>&1 &
  sleep 1
  run_perfdhcp "oooi-dhcp $mode" "$guarantee"
  server_metrics "$PA"
  stop "$W/server.pid"
  echo "   leases in the store: $("$BIN" leases --data-dir "$data" | tail -n +2 | wc -l)"
  rm -rf "$data"
done

echo "== kea-dhcp4 $(kea-dhcp4 -V | head -1) (memfile, persist: appended to a CSV, no fsync)"
KEA_PIDFILE_DIR="$W/kea" KEA_LOCKFILE_DIR="$W/kea" prio "$W/server.pid" taskset -c "$SERVER_CPU" \
  ip netns exec "$PA" kea-dhcp4 -c "$W/etc/kea.json" > "$W/kea/stdout.log" 2>&1 &
sleep 2
run_perfdhcp "kea memfile" "ACK after write() to the CSV: survives kill -9, not power loss"
stop "$W/server.pid"
echo "   leases in the CSV: $(grep -c '^10\.' "$W/kea/leases4.csv" || true)"

echo "== load after: $(uptime)"
echo "== net.core.rmem_default: $(cat "$RMEM") (before the run: $RMEM_SYSTEM)"
echo
echo "== summary: $RATE DISCOVER/s and $RENEW_RATE renewals/s offered for $SECS s (leases/s = perfdhcp's completed DORAs/s; renews/s = renewal ACKs/s; client rb = perfdhcp's receive buffer, bytes)"
printf '%-16s %10s %10s %10s %10s %12s %10s  %s\n' server leases/s renews/s "DO drops" "RA drops" "lost@client" "client rb" durability
for row in "${SUMMARY[@]}"; do echo "$row"; done
exit "$PAIR_FAILED"
