#!/usr/bin/env bash
# Boots the appliance (images/appliance/build.sh first) and shows traffic
# through it: its two NICs' TAPs go into a client namespace and a backend
# namespace with three HTTP and UDP backends (`portico tool http-serve` /
# `udp-echo`, 10.1.0.10-12), the guest forwards with `--driver` (afpacket,
# afxdp or dpdk); curl through the VIP and the NodePort, UDP queries through
# the VIP, the guest's `portico stats` from the host, then the ACPI power
# button. Everything it made is removed at the end (also on failure/Ctrl-C).
#
#   sudo images/appliance/demo.sh [--driver afpacket|afxdp|dpdk]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/rootfs.sh
. "$here/../lib/rootfs.sh"   # repo, target
driver=afpacket
while (($#)); do
    case "$1" in
        --driver) driver=$2; shift 2 ;;
        *) echo "demo.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
portico=${PORTICO:-$target/appliance/portico}
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (namespaces, TAPs)" >&2; exit 1; }
[ -x "$portico" ] || { echo "demo.sh: no $portico (run images/appliance/build.sh)" >&2; exit 1; }

id=$$
work=$(mktemp -d "${TMPDIR:-/tmp}/portico-demo.XXXXXX")
qns=pdq$id cns=pdc$id bns=pdb$id tap0=pdt0x$id tap1=pdt1x$id
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    sleep 0.5
    for ns in "$qns" "$cns" "$bns"; do ip netns del "$ns" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

case "$driver" in
    afpacket) section= dev0= dev1= pages=0 ;;
    afxdp) section=$'[dataplane.afxdp]\nmode = "native"' dev0= dev1= pages=0 ;;
    dpdk)
        section=$'[dpdk]\nhugepages = true\nmemory_mb = 256\nextra_args = ["--iova-mode=pa"]'
        dev0='dpdk_device = "0000:00:04.0"' dev1='dpdk_device = "0000:00:05.0"' pages=192 ;;
    *) echo "demo.sh: --driver afpacket, afxdp or dpdk" >&2; exit 2 ;;
esac
cat >"$work/portico.toml" <<TOML
[dataplane]
workers = 1
$section

[[port]]
name = "outside"
driver = "$driver"
interface = "eth0"
$dev0
role = "outside"
node_addresses = ["192.0.2.1/24"]

[[port]]
name = "inside"
driver = "$driver"
interface = "eth1"
$dev1
role = "inside"
snat_addresses = ["10.1.0.1/24"]

[[service]]
name = "web"
protocol = "tcp"
vip = "192.0.2.10"
port = 80
node_port = 30080
snat = true
backends = [{ address = "10.1.0.10", port = 8080 }, { address = "10.1.0.11", port = 8080 }, { address = "10.1.0.12", port = 8080 }]

[[service]]
name = "dns"
protocol = "udp"
vip = "192.0.2.10"
port = 53
snat = true
backends = [{ address = "10.1.0.10", port = 5353 }, { address = "10.1.0.11", port = 5353 }, { address = "10.1.0.12", port = 5353 }]
TOML

for ns in "$qns" "$cns" "$bns"; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
for tap in "$tap0" "$tap1"; do
    ip -n "$qns" tuntap add dev "$tap" mode tap
    ip -n "$qns" link set "$tap" up
done
started=$(date +%s%N)
ip netns exec "$qns" "$here/run.sh" --config "$work/portico.toml" --tap0 "$tap0" --tap1 "$tap1" \
    --admin-port 8080 --metrics-port 9100 --monitor "$work/monitor.sock" --hugepages "$pages" \
    >"$work/console.log" 2>&1 &
pids+=($!)
echo "== booting the appliance (driver $driver; console: $work/console.log)"
for _ in $(seq 600); do
    ip -n "$qns" link show "$tap0" | grep -q NO-CARRIER || ip -n "$qns" link show "$tap1" | grep -q NO-CARRIER || break
    sleep 0.1
done
ip -n "$qns" link set "$tap0" netns "$cns"
ip -n "$qns" link set "$tap1" netns "$bns"
ip -n "$cns" link set "$tap0" up
ip -n "$cns" addr add 192.0.2.100/24 dev "$tap0"
ip -n "$bns" link set "$tap1" up
for n in 1 2 3; do
    addr=10.1.0.1$((n - 1))
    ip -n "$bns" addr add "$addr/24" dev "$tap1"
    ip netns exec "$bns" "$portico" tool http-serve --listen "$addr:8080" --name "b$n" >/dev/null 2>&1 &
    pids+=($!)
    ip netns exec "$bns" "$portico" tool udp-echo --listen "$addr:5353" --name "b$n" >/dev/null 2>&1 &
    pids+=($!)
done

answered=0
for _ in $(seq 240); do
    if ip netns exec "$cns" curl -sf --max-time 2 http://192.0.2.10/ >/dev/null; then answered=1; break; fi
    sleep 1
done
if [ "$answered" = 0 ]; then
    echo "demo.sh: no answer through the appliance; console:" >&2
    cat "$work/console.log" >&2
    exit 1
fi
echo "== first answer $(( ($(date +%s%N) - started) / 1000000 )) ms after QEMU started"
echo "== 30 HTTP requests to the VIP 192.0.2.10:80 (answers per backend)"
for _ in $(seq 30); do ip netns exec "$cns" curl -s --max-time 5 -H 'Connection: close' http://192.0.2.10/; done | sort | uniq -c
echo "== 30 HTTP requests to the NodePort 192.0.2.1:30080"
for _ in $(seq 30); do ip netns exec "$cns" curl -s --max-time 5 -H 'Connection: close' http://192.0.2.1:30080/; done | sort | uniq -c
echo "== 30 UDP queries to the VIP 192.0.2.10:53"
ip netns exec "$cns" "$portico" tool udp-query --target 192.0.2.10:53 --count 30 --timeout-ms 3000 |
    sed -n 's/^ok [0-9]* [^ ]* //p; s/^err .*/failed/p' | sort | uniq -c
echo "== portico stats of the guest (http://127.0.0.1:8080/cgi-bin/stats in QEMU's namespace)"
ip netns exec "$qns" curl -s --max-time 20 http://127.0.0.1:8080/cgi-bin/stats
echo "== ACPI power button"
python3 - "$work/monitor.sock" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
time.sleep(0.3)
s.send(b"system_powerdown\n")
time.sleep(0.3)
PY
wait "${pids[0]}" || true
grep -E 'state: stopping|gateway::lifecycle: stopped|powering off|Power down' "$work/console.log"
