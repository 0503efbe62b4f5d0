import { test } from "node:test";
import assert from "node:assert/strict";
import { createShutdownSignals, type ShutdownEnv } from "../../../lib/app/shutdown.ts";

function fakeEnv(backstopMs = 50) {
  const handlers = new Map<string, () => void>();
  const calls: string[] = [];
  const env: ShutdownEnv = {
    on: (sig, h) => void handlers.set(sig, h),
    exit: (code) => void calls.push(`exit ${code}`),
    killChildren: () => void calls.push("kill children"),
    note: (m) => void calls.push(`note ${m}`),
    backstopMs,
  };
  return { env, calls, send: (sig: string) => handlers.get(sig)!() };
}

test("a signal before the agent takes over exits 0 at once (children killed first)", () => {
  const f = fakeEnv();
  const s = createShutdownSignals(f.env);
  f.send("SIGTERM");
  assert.deepEqual(f.calls, [
    "note received SIGTERM before the agent started: exiting",
    "kill children",
    "exit 0",
  ]);
  assert.equal(s.signal, "SIGTERM");
});

test("after takeOver the first signal requests an orderly shutdown; the backstop ends it within its bound", async () => {
  const f = fakeEnv(60);
  const s = createShutdownSignals(f.env);
  s.takeOver();
  const t0 = Date.now();
  f.send("SIGINT");
  assert.equal(await s.requested, "SIGINT");
  assert.equal(f.calls.length, 0, "nothing is killed while the agent stops in order");
  await new Promise((r) => setTimeout(r, 120));
  assert.equal(f.calls.at(-1), "exit 0");
  assert.ok(f.calls.includes("kill children"));
  assert.match(f.calls[0], /shutdown did not finish within 60ms of SIGINT/);
  assert.ok(Date.now() - t0 >= 55);
});

test("a second signal while shutting down kills the children and exits 0 at once", async () => {
  const f = fakeEnv(10_000);
  const s = createShutdownSignals(f.env);
  s.takeOver();
  f.send("SIGTERM");
  await s.requested;
  f.send("SIGTERM");
  assert.deepEqual(f.calls.slice(1), ["kill children", "exit 0"]);
  assert.match(f.calls[0], /again while shutting down/);
});
