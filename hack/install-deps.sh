#!/usr/bin/env bash
# Installs the Debian packages that herd's local instances and benchmarks need:
# containerd, runc and the CNI plugins (run the pods), etcd (each instance's
# store), iptables, nftables, conntrack and iproute2 (network namespaces, bridges,
# the kubelet's and kube-proxy's rules), openssl (instance certificates and keys), prometheus (its
# promtool checks the shipped alert rules; the integration tests run a real
# Prometheus scraping herd up), chromium (the dashboard's tests drive a real
# headless browser), busybox-static (the shell image herd image build bakes
# for add-ons' helper pods, such as the storage add-on's), bind9-dnsutils (dig, which the DNS
# tests query herd's DNS with), knot and dnsperf (make bench-dns compares herd's DNS with Knot
# under dnsperf's load), varnish (make bench-edge compares herd's edge with Varnish), awscli (the
# EC2 twin's tests drive it with the AWS CLI, to prove it speaks EC2's protocol and not only what the Go SDK accepts), for the test images of make conformance curl and netcat-openbsd
# (the programs agnhost's and jessie-dnsutils' tests call), and for herd image disk mmdebstrap,
# e2fsprogs, dosfstools, mtools, fdisk, binutils and systemd-boot-efi (the root, the file systems,
# the partition table and the unified kernel image), with qemu-system-x86 and ovmf (UEFI firmware)
# that make test-disk boots the disk under.
#
# Idempotent: when everything is installed it checks and exits quietly, without
# touching apt's lists. Otherwise it runs `apt-get update` once and installs what
# is missing. herd runs its own containerd and etcd per instance, so the system
# daemons that these packages ship are kept from starting and are disabled.
#
# Needs root (or sudo) and Debian or a derivative with apt.
set -euo pipefail

packages=(containerd runc containernetworking-plugins etcd-server iptables nftables iproute2 conntrack openssl prometheus chromium
	busybox-static bind9-dnsutils knot dnsperf varnish curl netcat-openbsd awscli
	mmdebstrap e2fsprogs dosfstools mtools fdisk binutils systemd-boot-efi qemu-system-x86 ovmf patch)

# Files each package must provide; checked after installing, so that a broken
# install fails here rather than when an instance boots.
required=(
	/usr/bin/containerd /usr/bin/containerd-shim-runc-v2 /usr/bin/ctr /usr/sbin/runc
	/usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/lib/cni/portmap
	/usr/bin/etcd /usr/sbin/iptables /usr/sbin/nft /usr/sbin/conntrack /usr/sbin/ip /usr/bin/openssl
	/usr/bin/prometheus /usr/bin/promtool /usr/bin/chromium /bin/busybox
	/usr/bin/dig /usr/sbin/knotd /usr/bin/dnsperf /usr/sbin/varnishd /usr/bin/curl /bin/nc.openbsd /usr/bin/aws
	/usr/bin/mmdebstrap /usr/sbin/mke2fs /usr/sbin/debugfs /usr/sbin/mkfs.fat /usr/bin/mcopy /usr/sbin/sfdisk
	/usr/bin/objcopy /usr/bin/qemu-system-x86_64 /usr/bin/patch
)

# System services these packages ship; herd runs its own instances of them (and
# its tests their own Prometheus, make bench-dns its own Knot, make bench-edge its own Varnish).
services=(containerd etcd prometheus knot varnish varnishncsa)

die() { echo "hack/install-deps.sh: $*" >&2; exit 1; }

missing_packages() {
	local p status
	for p in "${packages[@]}"; do
		status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
		[[ $status == installed ]] || echo "$p"
	done
}

missing_files() {
	local f
	for f in "${required[@]}"; do
		[[ -x $f ]] || echo "$f"
	done
}

systemd_running() { [[ -d /run/systemd/system ]]; }

# disable_services keeps the packaged containerd and etcd daemons from running:
# they would hold /run/containerd/containerd.sock and port 2379 on the host for
# nothing (and the packaged Prometheus port 9090). Quiet when they are already disabled and stopped.
disable_services() {
	local s
	command -v systemctl >/dev/null 2>&1 || return 0
	for s in "${services[@]}"; do
		[[ -e /lib/systemd/system/$s.service ]] || continue
		if systemd_running; then
			if systemctl is-enabled --quiet "$s" 2>/dev/null || systemctl is-active --quiet "$s" 2>/dev/null; then
				echo "disabling the system $s service (herd runs its own per instance)"
				$sudo systemctl disable --now --quiet "$s" || die "cannot disable the $s service: systemctl disable --now $s"
			fi
		elif [[ -n $(find /etc/systemd/system -name "$s.service" -type l 2>/dev/null) ]]; then
			# systemd is not running (a container, a sandbox): systemctl edits the
			# unit links offline, so the daemons stay off if it ever boots.
			$sudo systemctl disable --quiet "$s" 2>/dev/null || true
		fi
	done
}

if [[ $(id -u) -eq 0 ]]; then
	sudo=
elif command -v sudo >/dev/null 2>&1; then
	sudo=sudo
else
	sudo=
fi

command -v dpkg-query >/dev/null 2>&1 || die "dpkg-query not found: herd's local instances need Debian (or a derivative) with apt"

mapfile -t missing < <(missing_packages)
if [[ ${#missing[@]} -eq 0 && -z $(missing_files) ]]; then
	disable_services
	exit 0
fi
[[ ${#missing[@]} -gt 0 ]] || missing=("${packages[@]}") # a file is gone: reinstall all

if [[ $(id -u) -ne 0 && -z $sudo ]]; then
	die "need root to install ${missing[*]}: run as root, or: apt-get install ${missing[*]}"
fi

echo "installing ${missing[*]}"

# Keep the packages' maintainer scripts from starting their daemons (invoke-rc.d
# asks policy-rc.d; 101 means "not allowed"). Left alone if one already exists.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
	printf '#!/bin/sh\n# written by herd hack/install-deps.sh while it installs packages\nexit 101\n' | $sudo tee "$policy" >/dev/null
	$sudo chmod 755 "$policy"
	own_policy=1
fi
cleanup() { if [[ $own_policy == 1 ]]; then $sudo rm -f "$policy"; fi; }
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! $sudo apt-get update -qq >"$log" 2>&1; then
	cat "$log" >&2
	rm -f "$log"
	die "apt-get update failed (is a Debian mirror reachable?)"
fi
if ! $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
	cat "$log" >&2
	rm -f "$log"
	die "apt-get install ${missing[*]} failed (output above)"
fi
rm -f "$log"

mapfile -t gone < <(missing_files)
[[ ${#gone[@]} -eq 0 ]] || die "installed ${missing[*]}, but these are still missing: ${gone[*]}"

disable_services
echo "installed ${missing[*]}"
