#!/usr/bin/env bash
# Bring the emulated WAN up or down by hand; cp.sh does this itself.
#   bench/link.sh up        # netns + tbf + MinIO + toxiproxy, left running
#   bench/link.sh measure   # aggregate up/down MB/s over 32 streams, 1-stream MB/s, RTT
#   bench/link.sh down
#   ip netns exec ferrybench <cmd>   # run clients inside; S3 at http://127.0.0.1:9000
# PROFILE=wan|lan|far|custom, or RTT_MS / CONN_MBPS / AGG_MBPS; SECS, STREAMS for measure.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || { echo "link.sh: needs root (netns, tc)" >&2; exit 1; }
case ${1:-} in
  up) link_up "${GIB:-4}" ;;
  down) link_down ;;
  measure)
    measure_link "${SECS:-8}" "${STREAMS:-32}"
    one=$(nsx python3 "$BENCH/linkcap.py" up --secs "${SECS:-8}" --streams 1)
    echo "link ($PROFILE): up $LINK_UP MB/s, down $LINK_DOWN MB/s (${STREAMS:-32} streams);" \
         "1 stream up $one MB/s; RTT $LINK_RTT ms" ;;
  *) echo "usage: $0 up|down|measure" >&2; exit 2 ;;
esac
