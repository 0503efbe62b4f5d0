#!/usr/bin/env bash
# Runs every test: the suite under Deno, then under Bun (unit, CLI against the compiled binary, and the
# network-namespace e2e tests when root), and prints one closing line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
logdir=$(mktemp -d)
passed=0
failed=0
status=0

echo "== build dist/edgeproxy (the CLI and e2e tests run it)"
if ! bash compile.sh >"$logdir/build.log" 2>&1; then
  cat "$logdir/build.log"
  echo "build failed"
  failed=$((failed + 1))
  status=1
fi

targets=("${@:-tests/}")

echo "== deno test"
NO_COLOR=1 ./node_modules/.bin/deno test -A --parallel "${targets[@]}" 2>&1 | tee "$logdir/deno.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
line=$(grep -aoE '[0-9]+ passed( \([0-9]+ steps?\))? \| [0-9]+ failed' "$logdir/deno.log" | tail -1)
p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.*\| ([0-9]+) failed/\1/' <<<"$line")
passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
[ -n "$line" ] || { echo "no deno summary line"; failed=$((failed + 1)); status=1; }

echo "== bun test"
NO_COLOR=1 ./node_modules/.bin/bun test --timeout 120000 "${targets[@]}" 2>&1 | tee "$logdir/bun.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
p=$(grep -aoE '^ *[0-9]+ pass$' "$logdir/bun.log" | tail -1 | tr -dc 0-9)
f=$(grep -aoE '^ *[0-9]+ fail$' "$logdir/bun.log" | tail -1 | tr -dc 0-9)
[ -n "$p" ] || { echo "no bun summary line"; failed=$((failed + 1)); status=1; }
passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))

rm -rf "$logdir"
# Failures found before the tests ran (.ci/run's type/lint/format check).
failed=$((failed + ${EDGEPROXY_EXTRA_FAILURES:-0}))
[ "$failed" -eq 0 ] || status=1
echo "$passed passed, $failed failed"
exit $status
