#!/usr/bin/env bash
# One IPv6 TCP flow (iperf3 -6) through a gateway namespace, four ways in
# the same topology and run: Portico on af_packet with `gso = true` sending
# by its TX ring (`tx_path = "ring"`) and by `sendmmsg` (`"sendmsg"`, what
# `auto` picks on veth), Portico with `gso = false`, and the kernel (IPv6 forwarding, nftables DNAT to the
# backend and SNAT to the SNAT address — the same full NAT). The peers keep
# their offloads (TSO/GSO/GRO on, the veth default; off for `gso = false`,
# whose MTU-size frames cannot take super-packets). See bench/RESULTS.md,
# "IPv6 single flow with GSO pass-through". Needs root, iproute2, iperf3,
# nft, python3 and a portico binary. Creates three namespaces with unique
# names and removes them, and the processes it started, on exit.
#
# usage: bench/gso6-gateway.sh PORTICO_BINARY [seconds]
# (KEEP_LOG=1: print the end of the last portico log on exit, for debugging.)
set -euo pipefail
. "$(dirname "$0")/ns-chain.sh"
portico=$(realpath "$1")
secs=${2:-5}
s=g6b$$
dir=$(mktemp -d)
pids=()
cleanup() {
    [ "${KEEP_LOG:-}" ] && tail -20 "$dir/portico.log" || true
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    ns_chain_del "$s" c g b
    rm -rf "$dir"
}
trap cleanup EXIT
client=2001:db8:c::100 node=2001:db8:c::1 vip=2001:db8:c::10
snat=fd00:1::1 backend=fd00:1::10
ns_chain "$s" c g b c0 go gi b0
ip netns exec "${s}g" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
for l in "c ${s}c0 $client/64 $node" "b ${s}b0 $backend/64 $snat"; do
    set -- $l
    ip netns exec "${s}$1" sysctl -qw "net.ipv6.conf.$2.accept_dad=0" "net.ipv6.conf.$2.accept_ra=0"
    ip -n "${s}$1" link set "$2" up
    ip -n "${s}$1" -6 addr add "$3" dev "$2" nodad
    ip -n "${s}$1" -6 route add default via "$4"
done
for i in go gi; do ip -n "${s}g" link set "${s}$i" up; done

iperf() { # label
    ip netns exec "${s}b" iperf3 -s -1 -B "$backend" -p 5201 >/dev/null 2>&1 &
    local server=$!
    pids+=("$server")
    sleep 0.5
    local bps
    bps=$(ip netns exec "${s}c" timeout $((secs + 15)) iperf3 -6 -c "$vip" -p 5201 -t "$secs" -J |
        python3 -c 'import json,sys
r = json.load(sys.stdin)
print(r["end"]["sum_received"]["bits_per_second"] if "sum_received" in r["end"] else "0")
print(r.get("error", ""), file=sys.stderr)')
    wait "$server" 2>/dev/null || true
    last_bps=$bps
    printf '%-28s %8.2f Gbit/s\n' "$1" "$(python3 -c "print($bps / 1e9)")"
}

cpu_ticks() { # pid: user + system clock ticks of the process so far
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

run_portico() { # gso tx_path
    cat >"$dir/portico.toml" <<EOF
[dataplane]
workers = 1
idle = "adaptive"

[dataplane.afpacket]
gso = $1
tx_path = "$2"

[[port]]
name = "outside"
driver = "afpacket"
interface = "${s}go"
role = "outside"
node_addresses = ["192.0.2.1/24", "$node/64"]

[[port]]
name = "inside"
driver = "afpacket"
interface = "${s}gi"
role = "inside"
snat_addresses = ["10.1.0.1/24", "$snat/64"]

# (IPv4 addresses too: the SNAT allocator wants one of each family.)
[[service]]
name = "iperf6"
protocol = "tcp"
vip = "$vip"
port = 5201
snat = true
backends = [{ address = "$backend", port = 5201 }]
EOF
    rm -f "$dir/portico.sock"
    ip netns exec "${s}g" "$portico" run --config "$dir/portico.toml" \
        --admin-socket "$dir/portico.sock" --log-format json >"$dir/portico.log" 2>&1 &
    local gw=$!
    pids+=("$gw")
    for _ in $(seq 100); do [ -S "$dir/portico.sock" ] && break; sleep 0.1; done
    sleep 1
    local t0 t1
    t0=$(cpu_ticks "$gw")
    iperf "portico gso=$1 tx=$2" || tail -5 "$dir/portico.log"
    t1=$(cpu_ticks "$gw")
    # Gateway CPU per MiB forwarded (the transfer ran $secs s at last_bps).
    python3 -c "import os; t = ($t1 - $t0) / os.sysconf('SC_CLK_TCK'); mib = $last_bps * $secs / 8 / 2**20
print(f'    gateway CPU {t:.2f} s, {t * 1e6 / max(mib, 1):.0f} us/MiB')"
    ip netns exec "${s}g" "$portico" stats --admin-socket "$dir/portico.sock" --json |
        python3 -c 'import json, sys
for p in json.load(sys.stdin)["ports"]:
    print("   ", p["name"], "rx_gso_frames", p.get("rx_gso_frames", 0), "tx_gso_frames", p.get("tx_gso_frames", 0))'
    kill "$gw"
    wait "$gw" 2>/dev/null || true
}

offloads() { # on|off: the client's and the backend's ends
    ip netns exec "${s}c" "$portico" tool "offloads-$1" "${s}c0" >/dev/null
    ip netns exec "${s}b" "$portico" tool "offloads-$1" "${s}b0" >/dev/null
}
run_portico true ring
run_portico true sendmsg
# Without gso the peers must segment (a super-packet is too big for the
# gateway's MTU-size frames).
offloads off
run_portico false auto
offloads on
# The kernel path: the same addresses on the gateway's links, forwarding,
# DNAT to the backend and SNAT to the SNAT address.
ip netns exec "${s}g" sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.all.accept_dad=0 \
    "net.ipv6.conf.${s}go.disable_ipv6=0" "net.ipv6.conf.${s}gi.disable_ipv6=0" \
    "net.ipv6.conf.${s}go.accept_dad=0" "net.ipv6.conf.${s}gi.accept_dad=0" \
    net.ipv6.conf.all.forwarding=1
ip -n "${s}g" -6 addr add "$node/64" dev "${s}go" nodad
ip -n "${s}g" -6 addr add "$vip/128" dev "${s}go" nodad
ip -n "${s}g" -6 addr add "$snat/64" dev "${s}gi" nodad
ip netns exec "${s}g" nft -f - <<EOF
table ip6 bench {
    chain pre { type nat hook prerouting priority dstnat; ip6 daddr $vip tcp dport 5201 dnat to [$backend]:5201; }
    chain post { type nat hook postrouting priority srcnat; ip6 daddr $backend snat to $snat; }
}
EOF
iperf "kernel nftables"
