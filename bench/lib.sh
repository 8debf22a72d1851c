# shellcheck shell=bash disable=SC2034
# Sourced by bench/*.sh: an emulated WAN on loopback inside netns $NS.
#
#   client --lo(tbf: aggregate cap)--> connect delay :9000 --> toxiproxy :9010 (per-conn rate + latency) --lo--> MinIO :9100
#                                      toxiproxy :9001 (same toxics)             --lo--> linkcap.py :9101
#                                      connect delay :9002 --> toxiproxy :9012   --lo--> fake-gcs-server :9200 (GCS=1)
#
# Link profiles (1 MB = 10^6 bytes; AGG_DOWN_MBPS defaults to AGG_MBPS):
#   wan    RTT 80 ms, 8 MB/s per TCP connection, 100 MB/s aggregate
#   lan    RTT 1 ms, 100 MB/s per connection, 1000 MB/s aggregate
#   far    RTT 250 ms, 2 MB/s per connection, 50 MB/s aggregate
#   slow   a home or branch-office uplink: RTT 20 ms, no per-connection cap, 4 MB/s in all
#   lfp    a long fat pipe: RTT 200 ms, 10 MB/s per connection, 100 MB/s aggregate
#   lossy  wan, with 1 connection in 50 reset after 3 s and data cut into small slices
#   drop   wan, whose aggregate drops to a quarter after DROP_AT s and comes back DROP_FOR s later
#   asym   RTT 40 ms, 50 MB/s per connection, 12 MB/s up and 60 MB/s down in all
# or set RTT_MS / CONN_MBPS / AGG_MBPS / AGG_DOWN_MBPS yourself (they override the profile).
# A new connection's handshake costs a round trip (HANDSHAKE=1, the default): toxiproxy
# accepts on loopback at once and delays data only, so ferry-connect-delay sits in front of
# it on the S3 and GCS ports and passes a connection's bytes on RTT_MS after accepting it.
case ${PROFILE:=wan} in
  wan) : "${RTT_MS:=80}" "${CONN_MBPS:=8}" "${AGG_MBPS:=100}" ;;
  lan) : "${RTT_MS:=1}" "${CONN_MBPS:=100}" "${AGG_MBPS:=1000}" ;;
  far) : "${RTT_MS:=250}" "${CONN_MBPS:=2}" "${AGG_MBPS:=50}" ;;
  slow) : "${RTT_MS:=20}" "${CONN_MBPS:=1000}" "${AGG_MBPS:=4}" ;;
  lfp) : "${RTT_MS:=200}" "${CONN_MBPS:=10}" "${AGG_MBPS:=100}" ;;
  lossy) : "${RTT_MS:=80}" "${CONN_MBPS:=8}" "${AGG_MBPS:=100}" "${LOSSY:=1}" ;;
  drop) : "${RTT_MS:=80}" "${CONN_MBPS:=8}" "${AGG_MBPS:=100}" "${DROP_AT:=8}" "${DROP_FOR:=10}" ;;
  asym) : "${RTT_MS:=40}" "${CONN_MBPS:=50}" "${AGG_MBPS:=12}" "${AGG_DOWN_MBPS:=60}" ;;
  custom) : "${RTT_MS:?}" "${CONN_MBPS:?}" "${AGG_MBPS:?}" ;;
  *) echo "unknown PROFILE=$PROFILE (wan|lan|far|slow|lfp|lossy|drop|asym|custom)" >&2; return 2 ;;
esac
: "${AGG_DOWN_MBPS:=$AGG_MBPS}" "${LOSSY:=0}" "${DROP_AT:=0}" "${DROP_FOR:=0}" "${HANDSHAKE:=1}"
# HOPS_TRACE=DIR: the S3 proxies log each request's hops there (see delay_proxy, link_up).
if [ -n "${HOPS_TRACE:-}" ]; then
  mkdir -p "$HOPS_TRACE" && HOPS_TRACE=$(cd "$HOPS_TRACE" && pwd) || return 2
  STORE_PORT=9110
else
  STORE_PORT=9100
fi
NS=${NS:-ferrybench}
# Scheduling priority (nice) of the link's emulation (toxiproxy, the connect delays) and of
# MinIO. On a real network neither the wire nor the store runs on the client's cores; here
# they share two, and a negative LINK_NICE keeps a busy workload from slowing the emulated
# wire itself (bench/serve.sh's flood). 0 by default, as every figure before 2026-11-27 ran.
LINK_NICE=${LINK_NICE:-0} STORE_NICE=${STORE_NICE:-0}
TOOLS=${FERRY_TOOLS:-$HOME/.cache/ferry/bin}
BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONNECT_DELAY=${CONNECT_DELAY:-$BENCH/../target/release/ferry-connect-delay}
# tbf: burst must hold at least one loopback GSO packet (lo MTU 64 KiB) or tbf drops it.
# The queue must never drop: a drop in the sender's own qdisc is "local congestion" to TCP,
# which retries it every 500 ms and aborts the connection after 15 (ETIMEDOUT within 8 s),
# where a drop on a real path costs a retransmission. So each socket keeps at most one
# packet in the qdisc (TSQ_BYTES, the netns' tcp_limit_output_bytes) and the queue holds
# about 120 sockets' worth (TBF_LIMIT). LEGACY_QUEUE=1: the queue of every figure before
# 2026-12-02 (limit = rate x 5 ms + burst, 4 MiB of TSQ), which dropped. See README.md.
TBF_BURST=${TBF_BURST:-1m}
TBF_LIMIT=${TBF_LIMIT:-8m}
TSQ_BYTES=${TSQ_BYTES:-32768}
LEGACY_QUEUE=${LEGACY_QUEUE:-0}
tbf_args() { # rate
  if [ "$LEGACY_QUEUE" = 1 ]; then echo "rate $1 burst $TBF_BURST latency 5ms"
  else echo "rate $1 burst $TBF_BURST limit $TBF_LIMIT"; fi
}

nsx() { ip netns exec "$NS" "$@"; }
tox() { nsx curl -fsS -o /dev/null -X "$1" "http://127.0.0.1:8474$2" ${3:+-d "$3"}; } # toxiproxy API

# Pick a scratch dir with room for $1 GiB: tmpfs first so disk speed never bottlenecks,
# but tmpfs is RAM: only if MemAvailable keeps 4 GiB spare (others share this machine).
bench_dir() {
  local need_kb=$(( $1 * 1024 * 1024 )) d
  local mem_kb; mem_kb=$(awk '/^MemAvailable/{print $2}' /proc/meminfo)
  if [ $(( mem_kb - 4 * 1024 * 1024 )) -gt "$need_kb" ] &&
     [ "$(df -Pk /dev/shm | awk 'NR==2{print $4}')" -gt "$need_kb" ]; then echo "/dev/shm/$NS"; return; fi
  if [ "$(df -Pk /tmp | awk 'NR==2{print $4}')" -gt "$need_kb" ]; then echo "/tmp/$NS"; return; fi
  echo "bench_dir: need $1 GiB free in /dev/shm or /tmp" >&2; return 1
}

wait_http() { # url [curl args]: up to 30 s for a server to answer
  local _; for _ in $(seq 300); do nsx curl -fsS -o /dev/null "$@" 2>/dev/null && return 0; sleep 0.1; done
  echo "timeout waiting for $1" >&2; return 1
}

shape_lo() {
  # Loopback carries every byte twice (client<->toxiproxy, toxiproxy<->server) and both
  # directions share lo's one egress queue, so a plain root tbf caps payload at AGG/2 and
  # couples up and down (measured: 49.8 MB/s). Instead htb only classifies (no "default":
  # unclassified packets bypass shaping) into one tbf per direction, each on the hop
  # *before* toxiproxy so the real sender feels the aggregate cap:
  #   up:   client -> proxy  (dport 9000/9001, and 9002 for GCS=1)
  #   down: server -> proxy  (sport 9100/9101, and 9200 for GCS=1; with HOPS_TRACE the
  #         traced proxy in front of MinIO, 9110, so that MinIO's own hop is not shaped)
  # Shaping proxy -> client instead lets toxiproxy's latency toxic queue up to 1024 chunks
  # per connection whenever conns x CONN > AGG (measured: 1 GiB RSS after 5 s, 32 streams).
  local rate=$(( AGG_MBPS * 8 ))mbit down=$(( AGG_DOWN_MBPS * 8 ))mbit port   # tc: mbit = 10^6 bit/s ("mbps" would be bytes!)
  nsx tc qdisc add dev lo root handle 1: htb
  nsx tc class add dev lo parent 1: classid 1:1 htb rate 100gbit quantum 200000   # up
  nsx tc class add dev lo parent 1: classid 1:2 htb rate 100gbit quantum 200000   # down
  # shellcheck disable=SC2046
  nsx tc qdisc add dev lo parent 1:1 handle 10: tbf $(tbf_args "$rate")
  # shellcheck disable=SC2046
  nsx tc qdisc add dev lo parent 1:2 handle 20: tbf $(tbf_args "$down")
  [ "$LEGACY_QUEUE" = 1 ] || nsx sysctl -q -w net.ipv4.tcp_limit_output_bytes="$TSQ_BYTES"
  for port in 9000 9001 ${GCS_PORTS_UP:-}; do
    nsx tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip dport $port 0xffff flowid 1:1
  done
  for port in "$STORE_PORT" 9101 ${GCS_PORTS_DOWN:-}; do
    nsx tc filter add dev lo parent 1: protocol ip prio 1 u32 match ip sport $port 0xffff flowid 1:2
  done
}

add_proxy() { # name listen upstream
  local kb; kb=$(awk "BEGIN{print int($CONN_MBPS*1000)}") # bandwidth toxic: KB/s, KB = 1000 B
  tox POST /proxies "{\"name\":\"$1\",\"listen\":\"$2\",\"upstream\":\"$3\"}"
  # The latency toxic delays each chunk in ONE direction, so a request/response round trip
  # pays upstream + downstream: split RTT across both. Bandwidth goes first in each chain:
  # it has no buffer, so the sender feels backpressure at CONN rate; the latency toxic
  # behind it buffers 1024 chunks (only ~RTT/2 worth at that rate). The other order lets
  # toxiproxy swallow up to 32 MB per connection instantly, hiding client buffering.
  local s l
  for s in upstream downstream; do
    [ $s = upstream ] && l=$(( RTT_MS / 2 )) || l=$(( RTT_MS - RTT_MS / 2 ))
    tox POST "/proxies/$1/toxics" "{\"name\":\"bw_$s\",\"type\":\"bandwidth\",\"stream\":\"$s\",\"attributes\":{\"rate\":$kb}}"
    tox POST "/proxies/$1/toxics" "{\"name\":\"lat_$s\",\"type\":\"latency\",\"stream\":\"$s\",\"attributes\":{\"latency\":$l}}"
    if [ "$LOSSY" = 1 ]; then
      tox POST "/proxies/$1/toxics" "{\"name\":\"slice_$s\",\"type\":\"slicer\",\"stream\":\"$s\",\"attributes\":{\"average_size\":1400,\"size_variation\":600,\"delay\":0}}"
    fi
  done
  if [ "$LOSSY" = 1 ]; then
    tox POST "/proxies/$1/toxics" "{\"name\":\"reset\",\"type\":\"reset_peer\",\"stream\":\"upstream\",\"toxicity\":0.02,\"attributes\":{\"timeout\":3000}}"
  fi
}

# A proxy clients reach at PUBLIC: toxiproxy itself, or with HANDSHAKE=1 the connect delay
# in front of it (toxiproxy then listens 10 ports up). The tbf shapes the client's hop either way.
expose() { # name public upstream
  [ "$HANDSHAKE" = 1 ] || { add_proxy "$1" "$2" "$3"; return; }
  local at=127.0.0.1:$(( ${2##*:} + 10 ))
  add_proxy "$1" "$at" "$3"
  delay_proxy "$1" "$2" "$at" "$RTT_MS"
}

# ferry-connect-delay on LISTEN to UPSTREAM, connections passed on DELAY_MS after accepting.
# HOPS_TRACE=DIR: it logs each message's times to DIR/delay-NAME.trace (see its doc).
delay_proxy() { # name listen upstream delay_ms
  local pid _
  ip netns exec "$NS" env ${HOPS_TRACE:+"FERRY_CONNECT_DELAY_TRACE=$HOPS_TRACE/delay-$1.trace"} \
    nice -n "$LINK_NICE" "$CONNECT_DELAY" "$2" "$3" "$4" >"$BENCH_DIR/delay-$1.log" 2>&1 &
  pid=$!; echo $pid >"$BENCH_DIR/delay-$1.pid"
  for _ in $(seq 50); do   # listening, or it died: then say so, not "connection refused" later
    nsx ss -Hltn "sport = :${2##*:}" | grep -q . && return 0
    kill -0 $pid 2>/dev/null || break
    sleep 0.1
  done
  echo "connect delay on $2 did not start: $(cat "$BENCH_DIR/delay-$1.log")" >&2; return 1
}

# The drop profile: after DROP_AT s the aggregate falls to a quarter, DROP_FOR s later it is
# back. Started beside each timed run (link_change &), killed when the run ends.
link_change() {
  [ "$DROP_AT" != 0 ] || return 0
  local q=$(( AGG_MBPS * 2 ))mbit qd=$(( AGG_DOWN_MBPS * 2 ))mbit
  sleep "$DROP_AT"
  # shellcheck disable=SC2046
  nsx tc qdisc change dev lo parent 1:1 handle 10: tbf $(tbf_args "$q")
  # shellcheck disable=SC2046
  nsx tc qdisc change dev lo parent 1:2 handle 20: tbf $(tbf_args "$qd")
  sleep "$DROP_FOR"
  link_restore
}
link_restore() {
  # shellcheck disable=SC2046
  nsx tc qdisc change dev lo parent 1:1 handle 10: tbf $(tbf_args $(( AGG_MBPS * 8 ))mbit)
  # shellcheck disable=SC2046
  nsx tc qdisc change dev lo parent 1:2 handle 20: tbf $(tbf_args $(( AGG_DOWN_MBPS * 8 ))mbit)
}
link_up() { # [GiB of scratch space wanted]
  link_down 2>/dev/null || true
  BENCH_DIR=${BENCH_DIR:-$(bench_dir "${1:-4}")}
  mkdir -p "$BENCH_DIR/minio" "$BENCH_DIR/work"
  MINIO_CERTS=
  if [ "${LINK_TLS:-0}" = 1 ]; then   # MinIO over https, CA in $MINIO_CA
    MINIO_CERTS=$BENCH_DIR/certs MINIO_CA=$BENCH_DIR/certs/CAs/ca.crt
    make_certs "$MINIO_CERTS"
  fi
  ip netns add "$NS"
  nsx ip link set lo up
  GCS_PORTS_UP='' GCS_PORTS_DOWN=''
  [ "${GCS:-0}" = 1 ] && GCS_PORTS_UP=9002 GCS_PORTS_DOWN=9200
  shape_lo
  MINIO_ROOT_USER=minioadmin MINIO_ROOT_PASSWORD=minioadmin MINIO_UPDATE=off MINIO_BROWSER=off \
    ip netns exec "$NS" nice -n "$STORE_NICE" "$TOOLS/minio" server --quiet --address 127.0.0.1:9100 ${MINIO_CERTS:+--certs-dir "$MINIO_CERTS"} \
    "$BENCH_DIR/minio" >"$BENCH_DIR/minio.log" 2>&1 &
  echo $! >"$BENCH_DIR/minio.pid"   # not via nsx: a backgrounded function is a subshell, and
  ip netns exec "$NS" nice -n "$LINK_NICE" "$TOOLS/toxiproxy-server" -host 127.0.0.1 -port 8474 >"$BENCH_DIR/toxiproxy.log" 2>&1 &
  echo $! >"$BENCH_DIR/toxiproxy.pid" # $! must be the server (ip netns exec execs into it)
  wait_http http://127.0.0.1:8474/version
  if [ -n "${MINIO_CERTS:-}" ]; then
    wait_http https://127.0.0.1:9100/minio/health/live --cacert "$MINIO_CA"
  else
    wait_http http://127.0.0.1:9100/minio/health/live
  fi
  if [ "$HANDSHAKE" = 1 ] && [ ! -x "$CONNECT_DELAY" ]; then
    (cd "$BENCH/.." && cargo build --release -q -p ferry-testkit --bin ferry-connect-delay)
  fi
  if [ -n "${HOPS_TRACE:-}" ]; then
    # A second traced proxy, with no delay, between toxiproxy and MinIO, on MinIO's side of
    # the down shaper (which shapes its port instead: see shape_lo): its answers' times are
    # MinIO's own. Built whatever is there: an older build would trace nothing.
    (cd "$BENCH/.." && cargo build --release -q -p ferry-testkit --bin ferry-connect-delay)
    delay_proxy store 127.0.0.1:$STORE_PORT 127.0.0.1:9100 0
    expose s3 127.0.0.1:9000 127.0.0.1:$STORE_PORT
  else
    expose s3 127.0.0.1:9000 127.0.0.1:9100
  fi
  add_proxy raw 127.0.0.1:9001 127.0.0.1:9101
  if [ "${GCS:-0}" = 1 ]; then
    # GCS=1: fake-gcs-server (objects in memory) behind toxiproxy :9002, shaped like :9000.
    # -public-host without a port: path-style requests through the proxy match; -external-url
    # is the proxy, so the upload Location and mediaLink URLs it hands out cross the link too.
    ip netns exec "$NS" "$TOOLS/fake-gcs-server" -scheme http -host 127.0.0.1 -port 9200 -backend memory \
      -public-host 127.0.0.1 -external-url http://127.0.0.1:9002 >"$BENCH_DIR/gcs.log" 2>&1 &
    echo $! >"$BENCH_DIR/gcs.pid"
    wait_http http://127.0.0.1:9200/_internal/healthcheck
    expose gcs 127.0.0.1:9002 127.0.0.1:9200
  fi
  echo "link up: ns $NS, PROFILE=$PROFILE RTT ${RTT_MS}ms, ${CONN_MBPS} MB/s/conn, ${AGG_MBPS} MB/s aggregate;" \
       "handshake $([ "$HANDSHAKE" = 1 ] && echo "${RTT_MS}ms" || echo free);" \
       "tbf $(tbf_args "<rate>"), TSQ ${TSQ_BYTES} B (legacy queue: $LEGACY_QUEUE); nice: link $LINK_NICE, store $STORE_NICE; S3 via ${MINIO_CERTS:+https://}127.0.0.1:9000;" \
       "${GCS_PORTS_UP:+GCS via http://127.0.0.1:9002; }scratch $BENCH_DIR" >&2
}

# A private CA and a server certificate for 127.0.0.1 in DIR, laid out for MinIO's --certs-dir
# (public.crt, private.key, CAs/ca.crt). LINK_TLS=1 makes link_up call it and start MinIO
# on TLS (toxiproxy passes TLS through; clients trust $MINIO_CA). The recipe is that of
# scripts/services' minio-tls: rustls rejects a self-signed CA used as the server's own cert.
make_certs() { # dir
  local c=$1
  mkdir -p "$c/CAs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=ferry bench CA" \
    -keyout "$c/ca.key" -out "$c/CAs/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$c/private.key" -out "$c/server.csr" 2>/dev/null
  # DNS:127.0.0.1 too: pgBackRest 2.45 matches its endpoint only against DNS names.
  printf 'subjectAltName=IP:127.0.0.1,DNS:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$c/ext.cnf"
  openssl x509 -req -in "$c/server.csr" -CA "$c/CAs/ca.crt" -CAkey "$c/ca.key" -CAcreateserial -days 30 \
    -extfile "$c/ext.cnf" -out "$c/public.crt" 2>/dev/null
  chmod 644 "$c/CAs/ca.crt" "$c/public.crt"
}

# MinIO moves what is deleted into its trash and frees it later, in the background: on the
# tmpfs scratch, eight 3 GiB WAL loads in a row filled 23 GiB of RAM and the kernel killed
# MinIO (2026-12-03). Deleted objects only: the bench's own MinIO, after a delete.
drop_trash() { rm -rf "$BENCH_DIR/minio/.minio.sys/tmp/.trash/"* 2>/dev/null || :; }

link_down() { # safe to call twice and under set -e; kills only what the bench started
  local d=${BENCH_DIR:-} p
  [ -n "$d" ] || d=$(ls -d /dev/shm/"$NS" /tmp/"$NS" 2>/dev/null | head -1) || true
  for p in "$d"/*.pid; do [ -f "$p" ] && { kill "$(cat "$p")" 2>/dev/null || :; }; done
  # Anything else still in the namespace was started by the bench too (clients in flight).
  if ip netns list | grep -qw "$NS"; then
    for p in $(ip netns pids "$NS"); do kill "$p" 2>/dev/null || :; done
    sleep 0.5
    for p in $(ip netns pids "$NS"); do kill -9 "$p" 2>/dev/null || :; done
    ip netns del "$NS" || :
  fi
  if [[ $d == */"$NS" ]]; then rm -rf "$d"; fi   # only ever our own scratch dir
  return 0
}

# Link limit as seen by N parallel streams, per direction (MB/s), and one stream's rate.
measure_link() { # secs streams
  LINK_UP=$(nsx python3 "$BENCH/linkcap.py" up --secs "${1:-8}" --streams "${2:-32}")
  LINK_DOWN=$(nsx python3 "$BENCH/linkcap.py" down --secs "${1:-8}" --streams "${2:-32}")
  LINK_RTT=$(nsx python3 "$BENCH/linkcap.py" rtt)
}
