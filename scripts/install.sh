#!/usr/bin/env bash
# Installs everything kubesvc needs on a fresh Debian machine (run as root): the kernel tools the
# node proxy and agent drive (curl for the README walkthrough), and the Python package with its
# test dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for tool in ip:iproute2 nft:nftables iptables:iptables conntrack:conntrack sysctl:procps curl:curl nsenter:util-linux ipset:ipset haproxy:haproxy ipvsadm:ipvsadm strace:strace; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v kubectl >/dev/null 2>&1 || echo "note: kubectl is not installed; the API tests need it" >&2

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
# qemu, Debian's kernel and an initramfs for the tests that need IPVS, which run in a VM
# (scripts/vm-ipvs.sh); cached outside the repository, so this is quick once done.
./scripts/vm-ipvs.sh setup
