import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  decodeState,
  encodeState,
  loadStateCache,
  STATE_FILE,
  writeStateCache,
} from "../../lib/source/state_cache.ts";
import type { StateSnapshot } from "../../lib/source/state_store.ts";

const state: StateSnapshot = {
  services: [{
    metadata: { namespace: "ns1", name: "svc1", resourceVersion: "5" },
    spec: { clusterIP: "172.30.0.41" },
  }],
  endpointSlices: [{ metadata: { namespace: "ns1", name: "svc1-abc" }, addressType: "IPv4", endpoints: [] }],
  node: { metadata: { name: "node-a" } },
};

test("state cache round-trips and reports its age", () => {
  const text = encodeState(state, "node-a", Date.parse("2026-01-01T00:00:00Z"));
  const r = decodeState(text, "node-a", Date.parse("2026-01-01T00:01:00Z"));
  assert.ok(r.ok);
  assert.deepEqual(r.state, state);
  assert.equal(r.ageMs, 60_000);
});

test("state cache encoding is deterministic", () => {
  assert.equal(encodeState(state, "n", 0), encodeState(structuredClone(state), "n", 0));
});

test("a corrupt, truncated, foreign or other-node cache is refused with a reason", () => {
  const text = encodeState(state, "node-a", 0);
  const cases: Array<[string, string, RegExp]> = [
    ["other node", text, /belongs to node "node-a", this node is "node-b"/],
    ["truncated", text.slice(0, text.length - 20), /truncated/],
    ["no header", "garbage", /no header line/],
    ["header not JSON", "{oops\n{}", /header is not JSON/],
    ["foreign format", text.replace('"edgeproxy-state"', '"kube-state"'), /format "kube-state"/],
    ["foreign version", text.replace('"version":1', '"version":99'), /version 99/],
    ["bit flip", text.replace("172.30.0.41", "172.30.0.42"), /checksum mismatch/],
  ];
  for (const [name, t, re] of cases) {
    const r = decodeState(t, name === "other node" ? "node-b" : "node-a", 0);
    assert.equal(r.ok, false, name);
    if (!r.ok) assert.match(r.reason, re, name);
  }
});

test("writeStateCache writes atomically with mode 0600 and loadStateCache reads it back", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-cache-"));
  try {
    const missing = await loadStateCache(dir, "node-a", 0);
    assert.equal(missing.ok, false);
    if (!missing.ok) assert.equal(missing.missing, true);
    await writeStateCache(join(dir, "sub"), encodeState(state, "node-a", 1000));
    const st = await stat(join(dir, "sub", STATE_FILE));
    assert.equal(st.mode & 0o777, 0o600);
    const r = await loadStateCache(join(dir, "sub"), "node-a", 2000);
    assert.ok(r.ok);
    if (r.ok) assert.deepEqual(r.state, state);
    // A corrupted file on disk is refused, and names the file.
    const p = join(dir, "sub", STATE_FILE);
    await writeFile(p, (await readFile(p, "utf8")).replace("svc1", "svc9"));
    const bad = await loadStateCache(join(dir, "sub"), "node-a", 2000);
    assert.equal(bad.ok, false);
    if (!bad.ok) assert.match(bad.reason, new RegExp(`${STATE_FILE}: checksum mismatch`));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
