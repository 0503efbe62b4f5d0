import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../../lib/runtime/clock.ts";
import { MemoryRelease, releaseMemory } from "../../../lib/runtime/memory.ts";

describe("MemoryRelease", () => {
  it("releases once, the delay after the last of a burst of full syncs", () => {
    const clock = new FakeClock(0);
    const at: number[] = [];
    const reported: number[] = [];
    const r = new MemoryRelease(clock, 2000, () => {
      at.push(clock.now());
      return true;
    }, (ms) => reported.push(ms));
    r.schedule(); // IPv4 full sync at 0
    clock.advance(1500);
    r.schedule(); // IPv6 full sync at 1500: the delay restarts
    clock.advance(1999);
    assert.deepEqual(at, []);
    clock.advance(1);
    assert.deepEqual(at, [3500]);
    assert.equal(reported.length, 1);
    clock.advance(10_000);
    assert.deepEqual(at, [3500], "nothing more without a new full sync");
    r.schedule();
    clock.advance(2000);
    assert.deepEqual(at, [3500, 15_500]);
  });

  it("does not report when the runtime has no collector, and stop() cancels a pending release", () => {
    const clock = new FakeClock(0);
    let calls = 0;
    const reported: number[] = [];
    const none = new MemoryRelease(clock, 10, () => {
      calls++;
      return false;
    }, (ms) => reported.push(ms));
    none.schedule();
    clock.advance(10);
    assert.equal(calls, 1);
    assert.deepEqual(reported, []);

    const stopped = new MemoryRelease(clock, 10, () => {
      calls++;
      return true;
    });
    stopped.schedule();
    stopped.stop();
    stopped.schedule();
    clock.advance(100);
    assert.equal(calls, 1);
  });

  it("releaseMemory runs a collection on Bun (the shipped runtime)", () => {
    const isBun = (globalThis as { Bun?: unknown }).Bun !== undefined;
    const hasGc = typeof (globalThis as { gc?: unknown }).gc === "function";
    assert.equal(releaseMemory(), isBun || hasGc);
  });
});
