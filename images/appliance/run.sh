#!/usr/bin/env bash
# Boots the Portico appliance (images/appliance/build.sh) under QEMU with two
# virtio-net-pci NICs on TAP devices (guest eth0, eth1 at PCI 0000:00:04.0 and
# 0000:00:05.0) and a management NIC (guest eth2, QEMU user networking) whose
# admin page and /metrics are forwarded to host ports.
#
#   images/appliance/run.sh --config portico.toml [options]
#     --tap0 NAME / --tap1 NAME   TAP devices of eth0/eth1 (created if missing;
#                                 default portico-tap0/1)
#     --admin-port PORT           host 127.0.0.1:PORT -> guest :8080 (admin page:
#                                 /cgi-bin/stats runs `portico stats`, /check.txt)
#     --metrics-port PORT         host 127.0.0.1:PORT -> guest :9100 (/metrics)
#     --hugepages N               2 MB pages reserved at boot (DPDK; default 0)
#     --memory-mb MB              guest memory (default 1024)
#     --monitor PATH              QEMU monitor socket (`system_powerdown` = ACPI
#                                 power button: the appliance powers off cleanly)
#     --image DIR                 kernel + initramfs (default $PORTICO_APPLIANCE_IMAGE,
#                                 else target/appliance-image)
#
# Acceleration: KVM when /dev/kvm works for a stock guest, else TCG
# (`-accel tcg -cpu max`). kvm-pvm (a paravirtual KVM) cannot boot a stock
# Debian kernel (QEMU aborts "failed to set MSR 0x10a" with -cpu host), so it
# counts as not working. PORTICO_QEMU_ACCEL=kvm|tcg overrides.
# The serial console (boot messages, the init's and portico's logs) is stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
image=${PORTICO_APPLIANCE_IMAGE:-${CARGO_TARGET_DIR:-$repo/target}/appliance-image}
config= tap0=portico-tap0 tap1=portico-tap1 admin_port= metrics_port= hugepages=0 memory_mb=1024 monitor=
while (($#)); do
    case "$1" in
        --config) config=$2; shift 2 ;;
        --tap0) tap0=$2; shift 2 ;;
        --tap1) tap1=$2; shift 2 ;;
        --admin-port) admin_port=$2; shift 2 ;;
        --metrics-port) metrics_port=$2; shift 2 ;;
        --hugepages) hugepages=$2; shift 2 ;;
        --memory-mb) memory_mb=$2; shift 2 ;;
        --monitor) monitor=$2; shift 2 ;;
        --image) image=$2; shift 2 ;;
        *) echo "run.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
    esac
done
[ -f "$image/vmlinuz" ] && [ -f "$image/initramfs.img" ] ||
    { echo "run.sh: no appliance in $image (run images/appliance/build.sh)" >&2; exit 1; }

accel=${PORTICO_QEMU_ACCEL:-}
if [ -z "$accel" ]; then
    if [ -w /dev/kvm ] && [ ! -d /sys/module/kvm_pvm ]; then accel=kvm; else accel=tcg; fi
fi
case "$accel" in
    kvm) accel_args=(-accel kvm -cpu host) ;;
    tcg) accel_args=(-accel tcg -cpu max) ;;
    *) echo "run.sh: PORTICO_QEMU_ACCEL must be kvm or tcg" >&2; exit 2 ;;
esac
echo "run.sh: accelerator $accel" >&2

for tap in "$tap0" "$tap1"; do
    ip link show "$tap" >/dev/null 2>&1 || ip tuntap add dev "$tap" mode tap
done
fwd=
[ -n "$admin_port" ] && fwd+=",hostfwd=tcp:127.0.0.1:$admin_port-:8080"
[ -n "$metrics_port" ] && fwd+=",hostfwd=tcp:127.0.0.1:$metrics_port-:9100"
# Guest offloads off: virtio_net refuses native XDP while the host may hand it
# GRO'd or checksum-less frames.
nic_opts=guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off,guest_csum=off,mrg_rxbuf=off
args=(
    "${accel_args[@]}" -machine q35 -smp 1 -m "$memory_mb" -nodefaults -no-user-config
    -display none -serial stdio -no-reboot
    -kernel "$image/vmlinuz" -initrd "$image/initramfs.img"
    -append "console=ttyS0 panic=-1 quiet loglevel=4 portico.hugepages=$hugepages portico.mgmt=eth2:10.0.2.15/24:10.0.2.2"
    -netdev "tap,id=n0,ifname=$tap0,script=no,downscript=no"
    -device "virtio-net-pci,netdev=n0,bus=pcie.0,addr=0x4,mac=52:54:00:00:00:10,$nic_opts"
    -netdev "tap,id=n1,ifname=$tap1,script=no,downscript=no"
    -device "virtio-net-pci,netdev=n1,bus=pcie.0,addr=0x5,mac=52:54:00:00:00:11,$nic_opts"
    -netdev "user,id=mgmt,net=10.0.2.0/24,restrict=on$fwd"
    -device "virtio-net-pci,netdev=mgmt,bus=pcie.0,addr=0x6,mac=52:54:00:00:00:12"
)
[ -n "$config" ] && args+=(-fw_cfg "name=opt/portico/config,file=$config")
[ -n "$monitor" ] && args+=(-monitor "unix:$monitor,server=on,wait=off")
exec qemu-system-x86_64 "${args[@]}"
