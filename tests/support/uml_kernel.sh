#!/usr/bin/env bash
# Installs a user-mode-linux kernel that boots on this host into /opt/edgeproxy-uml (tests/support/uml.ts
# looks there first). Debian bookworm's user-mode-linux (6.1) panics on hosts whose CPUs have AMX
# ("ptrace set fp regs failed, errno = 14": the host's XSAVE area is larger than the 6.1 guest expects);
# unstable's (7.x) sizes it from the host. Both the kernel and the glibc it is linked against are taken
# from Debian unstable with apt's ordinary client, into private lists and a private directory: the host's
# apt sources and its libc are not touched (the binary's interpreter and rpath point into the directory).
# Idempotent; exits 0 without doing anything when the directory already holds a kernel.
set -euo pipefail
dest=${EDGEPROXY_UML_ROOT:-/opt/edgeproxy-uml}
[ -x "$dest/linux.uml" ] && exit 0
need=()
for tool in patchelf:patchelf modprobe:kmod ipvsadm:ipvsadm ipset:ipset; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs"
# The host's own Debian mirror (its apt sources), with the unstable suite.
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v -- '-security' | head -n 1 || true)
[ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $2 ~ /^https?:/ && $2 !~ /-security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$mirror" ] || { echo "uml_kernel.sh: no Debian mirror found in the host's apt sources" >&2; exit 1; }
echo "deb $mirror sid main" >"$work/sources.list"
apt_opts=(-q -o "Dir::Etc::sourcelist=$work/sources.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache" -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update >/dev/null
(cd "$work/debs" && apt-get "${apt_opts[@]}" download user-mode-linux libc6 >/dev/null)
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$dest.tmp"; done
cp "$dest.tmp/usr/bin/linux.uml" "$dest.tmp/linux.uml"
patchelf --set-interpreter "$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
  --set-rpath "$dest/usr/lib/x86_64-linux-gnu" "$dest.tmp/linux.uml"
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "user-mode-linux $(ls "$dest/usr/lib/uml/modules") in $dest"
