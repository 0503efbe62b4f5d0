#!/usr/bin/env bash
# Provides a user-mode-linux kernel for the IPVS tests (tests/support/uml.ts looks in the same places).
#
# 1. Builds one from Debian unstable's linux-source with tests/support/uml_kernel.config merged over
#    `make ARCH=um defconfig`, into /opt/edgeproxy-uml-<first 12 hex of the config's sha256> (override:
#    $EDGEPROXY_UML_BUILD_ROOT). Debian's prebuilt user-mode-linux packages lack IPv4 iptables (7.x) or
#    panic on hosts whose CPUs have AMX (6.1: "ptrace set fp regs failed"); the kernel built here has IPVS,
#    ipset, iptables (legacy and nf_tables) and boots on those hosts. The build runs under `nice -n 19`
#    with $EDGEPROXY_UML_JOBS jobs (default: the number of CPUs).
# 2. If the build fails: installs Debian unstable's prebuilt user-mode-linux (and the glibc it is linked
#    against) into /opt/edgeproxy-uml (override: $EDGEPROXY_UML_ROOT), as before; the IPVS mode's e2e test
#    skips there (no IPv4 iptables), the other UML tests run.
#
# Packages come from the host's own Debian mirror (its apt sources) with the unstable suite, through apt's
# ordinary client with private lists and cache: the host's apt sources and its libc are not touched.
# Idempotent: exits 0 at once when the kernel for this config is already built.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
config="$here/uml_kernel.config"
hash=$(sha256sum "$config" | cut -c1-12)
built=${EDGEPROXY_UML_BUILD_ROOT:-/opt/edgeproxy-uml-$hash}
prebuilt=${EDGEPROXY_UML_ROOT:-/opt/edgeproxy-uml}
[ -x "$built/linux.uml" ] && exit 0

need=()
for tool in patchelf:patchelf modprobe:kmod ipvsadm:ipvsadm ipset:ipset gcc:gcc make:make flex:flex \
  bison:bison bc:bc perl:perl xz:xz-utils; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || need+=("${tool##*:}")
done
[ -e /usr/include/stdio.h ] || need+=(libc6-dev) # the UML kernel is a host program: it links against libc
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

build() {
  # linux-source (a meta package) depends on the current linux-source-X.Y.
  local pkg src t0
  pkg=$(apt-cache "${apt_opts[@]}" depends linux-source 2>/dev/null | sed -n 's/^ *Depends: \(linux-source-[0-9.]*\)$/\1/p' | head -n 1)
  [ -n "$pkg" ] || { echo "uml_kernel.sh: no linux-source-X.Y in unstable" >&2; return 1; }
  t0=$(date +%s)
  (cd "$work/debs" && apt-get "${apt_opts[@]}" download "$pkg" >/dev/null)
  echo "uml_kernel.sh: $(basename "$work"/debs/"$pkg"_*.deb) ($(du -m "$work"/debs/"$pkg"_*.deb | cut -f1) MB) in $(($(date +%s) - t0)) s"
  mkdir -p "$work/src"
  dpkg-deb --fsys-tarfile "$work"/debs/"$pkg"_*.deb | tar -x -C "$work/src" --wildcards './usr/src/*.tar.xz'
  tar -xJf "$work"/src/usr/src/"$pkg".tar.xz -C "$work/src"
  rm -f "$work"/debs/*.deb "$work"/src/usr/src/*.tar.xz
  src="$work/src/$pkg"
  local out="$work/out"
  mkdir -p "$out"
  make -s -C "$src" ARCH=um O="$out" defconfig >/dev/null
  "$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "$config" >/dev/null
  make -s -C "$src" ARCH=um O="$out" olddefconfig >/dev/null
  # Every option of the config must have survived olddefconfig (a renamed or unmet option fails here).
  local missing
  missing=$(grep -oE '^CONFIG_[A-Z0-9_]+=.*' "$config" | while read -r line; do
    grep -qxF "$line" "$out/.config" || echo "$line"
  done)
  [ -z "$missing" ] || { echo "uml_kernel.sh: options not taken by $pkg: $missing" >&2; return 1; }
  t0=$(date +%s)
  nice -n 19 make -s -C "$src" ARCH=um O="$out" -j"${EDGEPROXY_UML_JOBS:-$(nproc)}" >"$work/build.log" 2>&1 ||
    { tail -n 40 "$work/build.log" >&2; return 1; }
  rm -rf "$built.tmp" && mkdir -p "$built.tmp/modroot"
  make -s -C "$src" ARCH=um O="$out" INSTALL_MOD_PATH="$built.tmp/modroot" modules_install >/dev/null
  local release
  release=$(cat "$out/include/config/kernel.release")
  mkdir -p "$built.tmp/usr/lib/uml/modules"
  mv "$built.tmp/modroot/lib/modules/$release" "$built.tmp/usr/lib/uml/modules/$release"
  rm -f "$built.tmp/usr/lib/uml/modules/$release/build" # points into the build directory, removed below
  rm -rf "$built.tmp/modroot"
  cp "$out/linux" "$built.tmp/linux.uml"
  cp "$out/.config" "$built.tmp/config"
  echo "$pkg $(apt-cache "${apt_opts[@]}" show "$pkg" | sed -n 's/^Version: //p' | head -n 1)" >"$built.tmp/SOURCE"
  rm -rf "$built" && mv "$built.tmp" "$built"
  echo "uml_kernel.sh: built user-mode-linux $release in $(($(date +%s) - t0)) s into $built"
}

prebuilt() {
  [ -x "$prebuilt/linux.uml" ] && return 0
  (cd "$work/debs" && apt-get "${apt_opts[@]}" download user-mode-linux libc6 >/dev/null)
  rm -rf "$prebuilt.tmp" && mkdir -p "$prebuilt.tmp"
  for d in "$work"/debs/*.deb; do dpkg-deb -x "$d" "$prebuilt.tmp"; done
  cp "$prebuilt.tmp/usr/bin/linux.uml" "$prebuilt.tmp/linux.uml"
  patchelf --set-interpreter "$prebuilt/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
    --set-rpath "$prebuilt/usr/lib/x86_64-linux-gnu" "$prebuilt.tmp/linux.uml"
  rm -rf "$prebuilt" && mv "$prebuilt.tmp" "$prebuilt"
  echo "uml_kernel.sh: prebuilt user-mode-linux $(ls "$prebuilt/usr/lib/uml/modules") in $prebuilt"
}

# In a subshell with its own errexit (bash ignores errexit inside a function called as an `if` condition).
set +e
(set -e && build)
rc=$?
set -e
if [ "$rc" -ne 0 ]; then
  rm -rf "$built.tmp"
  echo "uml_kernel.sh: building the kernel failed; installing Debian's prebuilt user-mode-linux instead" >&2
  rm -rf "${work:?}"/debs/*
  prebuilt
fi
