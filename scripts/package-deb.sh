#!/usr/bin/env bash
# Builds a Debian package from an already compiled binary, offline, with dpkg-deb:
#
#   bash scripts/package-deb.sh [--binary dist/edgeproxy] [--out dist] [--arch amd64|arm64]
#
# Writes <out>/edgeproxy_<version>_<arch>.deb (version from package.json; architecture from the binary's
# ELF header unless --arch is given) and prints its path. Contents:
#   /usr/bin/edgeproxy                       the binary (0755)
#   /lib/systemd/system/edgeproxy.service    systemd/edgeproxy.service, unchanged (ExecStart=/usr/bin/edgeproxy)
#   /etc/edgeproxy/edgeproxy.env             systemd/edgeproxy.env, a conffile (0600, directory 0700)
#   /usr/share/doc/edgeproxy/                copyright (LICENSE), changelog (CHANGELOG.md)
# Maintainer scripts: postinst creates /var/lib/edgeproxy (0700) and reloads systemd, without enabling or
# starting the service (an upgrade restarts it only if it was running); prerm stops and disables it on
# removal; postrm reloads systemd and, on purge, deletes /var/lib/edgeproxy. Inside a `dpkg --root`
# install (DPKG_ROOT set) the scripts work under that root and never call systemctl.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=dist/edgeproxy
out=dist
arch=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary | --out | --arch)
      [ $# -ge 2 ] || { echo "package-deb.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in --binary) binary="$2" ;; --out) out="$2" ;; --arch) arch="$2" ;; esac
      shift 2 ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "package-deb.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

[ -x "$binary" ] || { echo "package-deb.sh: --binary $binary: not an executable file (build it with bash compile.sh)" >&2; exit 1; }
command -v dpkg-deb >/dev/null || { echo "package-deb.sh: dpkg-deb not found (Debian package dpkg)" >&2; exit 1; }

version=$(sed -nE 's/^  "version": "([^"]+)",?$/\1/p' package.json)
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || { echo "package-deb.sh: package.json version: not a Debian version: '$version'" >&2; exit 1; }

if [ -z "$arch" ]; then
  # ELF header: bytes 0-3 magic, byte 18-19 e_machine (little endian): 0x3e x86-64, 0xb7 aarch64.
  magic=$(od -An -tx1 -N4 "$binary" | tr -d ' \n')
  machine=$(od -An -tu2 -j18 -N2 "$binary" | tr -d ' \n')
  [ "$magic" = 7f454c46 ] || { echo "package-deb.sh: --binary $binary: not an ELF executable" >&2; exit 1; }
  case "$machine" in
    62) arch=amd64 ;;
    183) arch=arm64 ;;
    *) echo "package-deb.sh: --binary $binary: ELF machine $machine has no Debian architecture here; pass --arch" >&2; exit 1 ;;
  esac
fi
# A musl build would install but not start on a glibc Debian system.
if grep -aq 'ld-musl-' <(head -c 4096 "$binary"); then
  echo "package-deb.sh: --binary $binary: a musl build; Debian packages need the glibc build" >&2
  exit 1
fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
install -d -m 0755 "$stage/DEBIAN" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/usr/share/doc/edgeproxy"
install -d -m 0700 "$stage/etc/edgeproxy"
install -m 0755 "$binary" "$stage/usr/bin/edgeproxy"
install -m 0644 systemd/edgeproxy.service "$stage/lib/systemd/system/edgeproxy.service"
install -m 0600 systemd/edgeproxy.env "$stage/etc/edgeproxy/edgeproxy.env"
install -m 0644 LICENSE "$stage/usr/share/doc/edgeproxy/copyright"
install -m 0644 CHANGELOG.md "$stage/usr/share/doc/edgeproxy/changelog"
echo /etc/edgeproxy/edgeproxy.env >"$stage/DEBIAN/conffiles"

installed_size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: edgeproxy
Version: $version
Architecture: $arch
Maintainer: edgeproxy maintainers <edgeproxy@localhost>
Installed-Size: $installed_size
Depends: iptables
Recommends: conntrack
Section: net
Priority: optional
Description: kube-proxy (iptables mode) for edge and bare-metal Kubernetes nodes
 edgeproxy programs a node's Services with the same iptables rules as upstream
 kube-proxy, in one executable, and keeps them working from a last-known-state
 cache while the apiserver is unreachable. Configure it in
 /etc/edgeproxy/edgeproxy.env, then: systemctl enable --now edgeproxy
EOF

cat >"$stage/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# Creates the state directory and tells systemd about the unit; never enables or starts the service (it
# needs a kubeconfig first). An upgrade restarts it only if it is running.
set -e
if [ "$1" = configure ]; then
  install -d -m 0700 "${DPKG_ROOT:-}/var/lib/edgeproxy"
  if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
    if [ -n "$2" ]; then
      systemctl try-restart edgeproxy.service || true
    fi
  fi
fi
exit 0
EOF

cat >"$stage/DEBIAN/prerm" <<'EOF'
#!/bin/sh
# On removal: stop the service and drop its enablement links (an upgrade leaves it running).
set -e
if [ "$1" = remove ] && [ -z "${DPKG_ROOT:-}" ]; then
  if [ -d /run/systemd/system ]; then
    systemctl stop edgeproxy.service || true
  fi
  if command -v systemctl >/dev/null 2>&1; then
    systemctl --no-reload disable edgeproxy.service >/dev/null 2>&1 || true
  fi
fi
exit 0
EOF

cat >"$stage/DEBIAN/postrm" <<'EOF'
#!/bin/sh
# After removal systemd forgets the unit; a purge also deletes the last-known-state cache. dpkg removes the
# conffile itself on purge; /etc/edgeproxy goes too if nothing of the operator's (a kubeconfig) is left.
set -e
case "$1" in
  remove | purge)
    if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
      systemctl daemon-reload || true
    fi
    ;;
esac
if [ "$1" = purge ]; then
  rm -rf "${DPKG_ROOT:-}/var/lib/edgeproxy"
  rmdir "${DPKG_ROOT:-}/etc/edgeproxy" 2>/dev/null || true
fi
exit 0
EOF
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/edgeproxy_${version}_${arch}.deb"
# gzip: every dpkg can read it, and it is fast (xz takes ~10x longer on a 100 MiB binary for ~20% less).
dpkg-deb --root-owner-group -Zgzip --build "$stage" "$deb" >/dev/null
echo "$deb"
