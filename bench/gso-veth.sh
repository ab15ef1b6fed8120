#!/usr/bin/env bash
# How big are the packets a kernel router namespace forwards for one TCP flow
# over veth? (GSO/TSO super-packets vs MTU frames; see bench/RESULTS.md,
# "Single-flow TCP and update latency again".) Needs root, iproute2, iperf3,
# python3. Creates three namespaces with unique names and removes them on exit.
#
# usage: bench/gso-veth.sh [seconds]
set -euo pipefail
. "$(dirname "$0")/ns-chain.sh"
secs=${1:-3}
s=gso$$
cleanup() {
    [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
    ns_chain_del "$s" a r b
}
trap cleanup EXIT
ns_chain "$s" a r b a0 r0 r1 b0
ip -n "${s}a" addr add 10.250.1.2/24 dev "${s}a0"
ip -n "${s}r" addr add 10.250.1.1/24 dev "${s}r0"
ip -n "${s}r" addr add 10.250.2.1/24 dev "${s}r1"
ip -n "${s}b" addr add 10.250.2.2/24 dev "${s}b0"
for l in "a ${s}a0" "r ${s}r0" "r ${s}r1" "b ${s}b0"; do
    set -- $l; ip -n "${s}$1" link set "$2" up
done
ip -n "${s}a" route add default via 10.250.1.1
ip -n "${s}b" route add default via 10.250.2.1
ip netns exec "${s}r" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
ip netns exec "${s}b" iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
server_pid=$!
sleep 0.5
stats() { ip -n "${s}r" -s -j link show "${s}r0"; }
before=$(stats)
ip netns exec "${s}a" timeout $((secs + 10)) iperf3 -c 10.250.2.2 -p 5299 -t "$secs" | grep -E "receiver"
after=$(stats)
python3 - "$before" "$after" <<'PY'
import json, sys
b = json.loads(sys.argv[1])[0]["stats64"]["rx"]
a = json.loads(sys.argv[2])[0]["stats64"]["rx"]
packets, octets = a["packets"] - b["packets"], a["bytes"] - b["bytes"]
print(f"router rx: {packets} packets, {octets} bytes, {octets / max(packets, 1):.0f} bytes/packet")
PY
