#!/usr/bin/env bash
# Builds one self-contained executable: dist/edgeproxy for this machine, or dist/edgeproxy-<target> for
# another one, each with a dist/<file>.sha256 (sha256sum format, checked with `sha256sum -c` in dist/).
#
#   bash compile.sh [--target linux-x64|linux-arm64|linux-x64-musl|linux-arm64-musl|bun-linux-...]
#
# The musl targets (Alpine, OpenWrt) need the host's libstdc++ and libgcc (Alpine: apk add libstdc++).
# With a Deno runtime (DENORT_BIN set to an executable denort) it uses `deno compile`; otherwise (the
# normal, offline case: no denort exists on npm or apt) it uses `bun build --compile`. The version comes
# from package.json through a JSON import, so the binary needs no file at run time. Prints the size;
# exits non-zero when the build fails or the result does not run.
set -euo pipefail
cd "$(dirname "$0")"

target=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) [ $# -ge 2 ] || { echo "compile.sh: --target needs a value" >&2; exit 2; }; target="$2"; shift 2 ;;
    --target=*) target="${1#--target=}"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "compile.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

case "$target" in
  *[!A-Za-z0-9._-]*) echo "compile.sh: --target: not a target name: $target" >&2; exit 2 ;;
esac
# The output is named after the target (bun- prefix dropped), so builds for several targets can sit side by side.
out=dist/edgeproxy${target:+-${target#bun-}}
mkdir -p dist
rm -f "$out" "$out.sha256"

if [ -n "${DENORT_BIN:-}" ] && [ -x "${DENORT_BIN}" ]; then
  args=(compile -A --no-check --output "$out")
  case "$target" in
    "") ;;
    *musl*) echo "compile.sh: deno compile has no musl target; unset DENORT_BIN to build with bun" >&2; exit 2 ;;
    linux-x64|bun-linux-x64*) args+=(--target x86_64-unknown-linux-gnu) ;;
    linux-arm64|bun-linux-arm64*) args+=(--target aarch64-unknown-linux-gnu) ;;
    *) args+=(--target "$target") ;;
  esac
  echo "== deno compile (denort: $DENORT_BIN) ${target:+target $target}"
  DENORT_BIN="$DENORT_BIN" ./node_modules/.bin/deno "${args[@]}" main.ts
else
  args=(build --compile --minify --bytecode --sourcemap --format=esm --no-compile-autoload-dotenv --no-compile-autoload-bunfig)
  case "$target" in
    "") ;;
    bun-*) args+=("--target=$target") ;;
    *) args+=("--target=bun-$target") ;;
  esac
  echo "== bun build --compile ${target:+target $target}"
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  # bun exits 0 even when it fails to generate bytecode, so its output is checked too.
  if ! ./node_modules/.bin/bun "${args[@]}" main.ts --outfile "$out" 2>&1 | tee "$log"; then
    echo "compile.sh: bun build failed" >&2
    exit 1
  fi
  if grep -qiE '^error:|Failed to generate bytecode' "$log"; then
    echo "compile.sh: bun build reported an error" >&2
    exit 1
  fi
fi

[ -x "$out" ] || { echo "compile.sh: $out was not produced" >&2; exit 1; }
# --sourcemap embeds the map the binary needs for file:line in its log lines; the separate .map bun also
# writes is not needed at run time, so it is not left beside the binary to be shipped by mistake.
rm -f "$out.map"
bytes=$(stat -c %s "$out")
echo "$out: $bytes bytes ($(awk -v b="$bytes" 'BEGIN { printf "%.1f MiB", b / 1048576 }'))"
(cd dist && sha256sum "${out#dist/}" >"${out#dist/}.sha256")
echo "$out.sha256: $(cut -d' ' -f1 "$out.sha256")"

# A binary for this machine must at least start and know its version.
native=""
case "$(uname -m)" in
  x86_64) native="x64" ;;
  aarch64) native="arm64" ;;
esac
if [ -z "$target" ] || [[ "$target" == *"$native"* && "$target" != *musl* ]]; then
  if ! version=$("$out" --version); then
    echo "compile.sh: $out --version failed" >&2
    exit 1
  fi
  echo "$out --version: $version"
fi
