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
#   /usr/share/doc/edgeproxy/                copyright (Apache-2.0), CHANGELOG.md.gz, changelog.gz (Debian's)
# Maintainer scripts: postinst creates /var/lib/edgeproxy (0700) and reloads systemd, without enabling or
# starting the service (an upgrade restarts it only if it was running); prerm stops and disables it on
# removal; postrm reloads systemd and, on purge, deletes /var/lib/edgeproxy. Inside a `dpkg --root`
# install (DPKG_ROOT set) the scripts work under that root and never call systemctl.
# The Maintainer field comes from DEBFULLNAME and DEBEMAIL, as for other Debian tools. The binary is not
# stripped: Bun appends the program to the executable, and strip would cut it off.
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
  magic=$(head -c 4 "$binary" | od -An -tx1 | tr -d ' \n')
  [ "$magic" = 7f454c46 ] || { echo "package-deb.sh: --binary $binary: not an ELF executable" >&2; exit 1; }
  machine=$(head -c 20 "$binary" | tail -c 2 | od -An -tu2 | tr -d ' \n')
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
maintainer="${DEBFULLNAME:-edgeproxy maintainers} <${DEBEMAIL:-edgeproxy@localhost}>"
# Dates from the last commit (or SOURCE_DATE_EPOCH), so the same tree gives the same package text.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
gzip -9nc CHANGELOG.md >"$stage/usr/share/doc/edgeproxy/CHANGELOG.md.gz"
printf 'edgeproxy (%s) unstable; urgency=medium\n\n  * Release %s; the changes are in /usr/share/doc/edgeproxy/CHANGELOG.md.gz.\n\n -- %s  %s\n' \
  "$version" "$version" "$maintainer" "$(LC_ALL=C date -u -R -d "@$epoch")" | gzip -9n >"$stage/usr/share/doc/edgeproxy/changelog.gz"
cat >"$stage/usr/share/doc/edgeproxy/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: edgeproxy
Comment: usr/bin/edgeproxy is a Bun-compiled executable: besides edgeproxy it contains the Bun runtime
 (MIT, with its bundled components under their own licenses) and the npm packages citty, consola and
 hono (MIT), yaml (ISC) and @kubernetes/client-node (Apache-2.0).

Files: *
Copyright: 2026 the edgeproxy authors
License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 compliance with the License. Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF
 ANY KIND, either express or implied.
 .
 On Debian systems, the complete text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
chmod 0644 "$stage"/usr/share/doc/edgeproxy/*
echo /etc/edgeproxy/edgeproxy.env >"$stage/DEBIAN/conffiles"

installed_size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: edgeproxy
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: libc6 (>= 2.17), iptables
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
