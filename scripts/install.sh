#!/usr/bin/env bash
# Installs everything kubesvc needs on a fresh Debian machine (run as root): the kernel tools the
# node proxy and agent drive (curl for the README walkthrough), Debian's chromium and its driver
# for the Service map's browser test (tests/ui; Selenium drives /usr/bin/chromedriver, no browser
# is ever downloaded), and the Python package with its test dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in ip:iproute2 nft:nftables iptables:iptables conntrack:conntrack sysctl:procps curl:curl nsenter:util-linux ipset:ipset haproxy:haproxy ipvsadm:ipvsadm strace:strace dig:bind9-dnsutils dnsmasq:dnsmasq-base chromium:chromium chromedriver:chromium-driver; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# etcd for --storage-backend etcd3, kubesvc's managed members and their tests. Debian's etcd-server package starts and enables
# a system etcd on 127.0.0.1:2379 when installed; kubesvc runs etcd processes of its own, so that
# one is kept from starting (policy-rc.d answers 101 "action forbidden" to invoke-rc.d and
# deb-systemd-invoke during the install) and is disabled and stopped afterwards.
if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    trap 'rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null  # etcdctl: snapshot restore (etcd 3.4)
fi
if [ -d /run/systemd/system ] && systemctl is-enabled --quiet etcd.service 2>/dev/null; then
  systemctl disable --now etcd.service >/dev/null 2>&1 || true
fi
if [ -x /etc/init.d/etcd ] && ls /etc/rc[2-5].d/S*etcd >/dev/null 2>&1; then
  # only the service's own process (its pidfile): `/etc/init.d/etcd stop` kills every etcd
  start-stop-daemon --stop --quiet --oknodo --pidfile /run/etcd.pid --exec /usr/bin/etcd || true
  update-rc.d etcd disable >/dev/null 2>&1 || true
fi
command -v kubectl >/dev/null 2>&1 || echo "note: kubectl is not installed; the API tests need it" >&2

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
# qemu, Debian's kernel and an initramfs for the tests that need IPVS, which run in a VM
# (scripts/vm-ipvs.sh); cached outside the repository, so this is quick once done.
./scripts/vm-ipvs.sh setup
