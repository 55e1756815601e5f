#!/usr/bin/env bash
# What the image would contain, tried without a container engine: a Debian bookworm root filesystem
# (debootstrap) with the image's packages (deploy/image-packages.txt), kpdiag's wheel installed with pip, the uid 10001
# user, then kpdiag run chrooted in it — as root in a network namespace with kube-proxy rules loaded by the
# rootfs's own iptables (what `kpdiag cluster` pods do), and as uid 10001 (analyze, trace).
#
# Not the image: python:3.11-slim-bookworm carries python.org's CPython 3.11 in /usr/local, this uses Debian's
# python3 (3.11.2) — the same bookworm userland and tools otherwise. Needs root, debootstrap, network to
# deb.debian.org and PyPI. Read-only on the host: everything happens in ROOTFS and a namespace it deletes.
#
#   bash deploy/rootfs-check.sh [ROOTFS]        (default /tmp/kpdiag-rootfs; reused when it exists)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-/tmp/kpdiag-rootfs}
NS=kpdiag-rootfs-$$
pkgs=$(grep -v '^\s*#' deploy/image-packages.txt | grep -vx python3 | xargs)
[ -n "$pkgs" ] || { echo "cannot read the packages from deploy/image-packages.txt" >&2; exit 2; }

if [ ! -x "$ROOT/usr/bin/python3" ]; then
  echo "== debootstrap bookworm + python3 + $pkgs"
  debootstrap --variant=minbase --include="python3,python3-pip,python3-venv,${pkgs// /,}" bookworm "$ROOT" http://deb.debian.org/debian >/dev/null
fi
cleanup() {
  ip netns del "$NS" 2>/dev/null || true
  umount "$ROOT/proc" 2>/dev/null || true
}
trap cleanup EXIT
mount -t proc proc "$ROOT/proc"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"

echo "== pip install the wheel and its dependencies (as the Dockerfile's 'pip install .')"
# wheels are fetched by the host's pip (its index and certificates), installed in the rootfs without an index
rm -rf "$ROOT/tmp/dist" && python3 -m pip wheel -q -w "$ROOT/tmp/dist" . 2>&1 >/dev/null | grep -v "^WARNING: Location" || true
ls "$ROOT"/tmp/dist/kpdiag-*.whl >/dev/null
chroot "$ROOT" pip install -q --break-system-packages --no-cache-dir --no-index --find-links /tmp/dist --root-user-action=ignore kpdiag
chroot "$ROOT" sh -c 'pip install -q --break-system-packages --no-cache-dir --no-deps --force-reinstall --root-user-action=ignore /tmp/dist/kpdiag-*.whl'
chroot "$ROOT" sh -c 'id -u kpdiag >/dev/null 2>&1 || useradd --uid 10001 --create-home --shell /usr/sbin/nologin kpdiag'

run() { echo "+ $*"; "$@"; }
echo "== as root, in a network namespace with kube-proxy's rules"
ip netns add "$NS"
ip -n "$NS" link set lo up
python3 -c 'from tests.synth import Endpoint, Port, Service, iptables_ruleset
print(iptables_ruleset([Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint("10.244.1.10"), Endpoint("10.244.1.11")])]), end="")' \
  > "$ROOT/tmp/rules.txt"
ip netns exec "$NS" chroot "$ROOT" sh -c 'iptables-restore < /tmp/rules.txt'
run ip netns exec "$NS" chroot "$ROOT" kpdiag --version
# (not 'ipvsadm --version': it asks the kernel, which loads ip_vs)
run ip netns exec "$NS" chroot "$ROOT" sh -c 'iptables --version; nft --version; ipset --version; dpkg-query -W ipvsadm; conntrack --version; ip -V'
run ip netns exec "$NS" chroot "$ROOT" kpdiag node --preflight ipvs --fail-on never | tail -n 12
ip netns exec "$NS" chroot "$ROOT" sh -c 'kpdiag node -o json --quiet --fail-on never > /tmp/node.json'
python3 - "$ROOT/tmp/node.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
f, prog = r["facts"], r["extra"].get("programmed") or {}
print(f"node report: mode {f.get('proxy_mode')}, {f.get('iptables_rules')} iptables rules, {prog.get('count')} service port(s) programmed, "
      f"{len(r['findings'])} finding(s), problems: {[p['source'] for p in r['problems']]}")
assert prog.get("count") == 1 and f.get("iptables_rules"), "the rootfs's own iptables did not show the loaded rules"
EOF

echo "== as uid 10001 (no capabilities): analyze and trace"
chmod 644 "$ROOT/tmp/node.json" "$ROOT/tmp/rules.txt"
run chroot --userspec=10001:10001 "$ROOT" kpdiag analyze /tmp/node.json --fail-on never | head -n 4
run chroot --userspec=10001:10001 "$ROOT" kpdiag trace --rules /tmp/rules.txt --src 192.168.50.2 --dst 10.96.0.20 --dport 80 --local-ip 192.168.50.1 | head -n 8
echo "== ok: the image's packages and kpdiag work in a bookworm userland"
