#!/usr/bin/env bash
# edgeproxy benchmarks (see bench/README.md).
#
#   npm run bench                 full run: 1k/5k/10k Services (+2k for the restore scaling), ~20-30 min
#   npm run bench -- --ci         reduced run: 1k Services (+2k restore), a few minutes; what CI may call
#   npm run bench -- --no-build   use dist/edgeproxy as it is (default: rebuild it with compile.sh first)
#   other flags go to bench/main.ts: --sizes=… --trap-sizes=… --only=render,restore,agent,idle
#                                    --restore-timeout=<s> --changes=N --repeats=N --binary=PATH --out=PATH
#
# Needs root for network namespaces and iptables (the render stage runs anywhere). Prints tables, writes
# bench/results.json and bench/results.md. Exits non-zero only when the harness itself fails, never for a
# missed target.
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
args=()
for a in "$@"; do
  case "$a" in
    --no-build) build=0 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$a") ;;
  esac
done

if [ "$build" = 1 ]; then
  # A failed build is not fatal: the agent stage then reports the binary as missing, the rest still runs.
  if ! bash compile.sh >/tmp/edgeproxy-bench-build.log 2>&1; then
    echo "bench: bash compile.sh failed (agent figures will be missing); last lines:" >&2
    tail -n 5 /tmp/edgeproxy-bench-build.log >&2
  fi
fi

exec ./node_modules/.bin/bun bench/main.ts "${args[@]}"
