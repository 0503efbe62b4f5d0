import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock, RealClock } from "../../../lib/runtime/clock.ts";
import { TokenBucket } from "../../../lib/util/token_bucket.ts";

describe("FakeClock", () => {
  it("fires due timers in due order, reading each timer's due time", () => {
    const clock = new FakeClock(0);
    const seen: string[] = [];
    clock.setTimeout(() => seen.push(`b@${clock.now()}`), 20);
    clock.setTimeout(() => seen.push(`a@${clock.now()}`), 10);
    clock.setTimeout(() => seen.push(`a2@${clock.now()}`), 10);
    clock.setTimeout(() => seen.push(`late@${clock.now()}`), 31);
    clock.advance(30);
    assert.deepEqual(seen, ["a@10", "a2@10", "b@20"]);
    assert.equal(clock.now(), 30);
    assert.equal(clock.nextTimerIn(), 1);
  });

  it("fires timers created by callbacks within the same advance, and honours clearTimeout", () => {
    const clock = new FakeClock(1000);
    const seen: number[] = [];
    const cancelled = clock.setTimeout(() => seen.push(-1), 5);
    clock.setTimeout(() => {
      seen.push(clock.now());
      clock.setTimeout(() => seen.push(clock.now()), 10);
      clock.setTimeout(() => seen.push(clock.now()), 100);
    }, 10);
    clock.clearTimeout(cancelled);
    clock.advance(50);
    assert.deepEqual(seen, [1010, 1020]);
    assert.equal(clock.pendingCount(), 1);
    assert.equal(clock.nextTimerIn(), 60);
  });

  it("treats negative and NaN delays as zero", () => {
    const clock = new FakeClock(0);
    let fired = 0;
    clock.setTimeout(() => fired++, -5);
    clock.setTimeout(() => fired++, NaN);
    clock.advance(0);
    assert.equal(fired, 2);
    assert.equal(clock.nextTimerIn(), null);
  });

  it("advanceAsync lets async callbacks schedule further timers in time", async () => {
    const clock = new FakeClock(0);
    const seen: number[] = [];
    clock.setTimeout(() => {
      void Promise.resolve().then(() => clock.setTimeout(() => seen.push(clock.now()), 5));
    }, 5);
    await clock.advanceAsync(20);
    assert.deepEqual(seen, [10]);
    assert.equal(clock.now(), 20);
  });
});

describe("RealClock", () => {
  it("fires and cancels real timers", async () => {
    const clock = new RealClock();
    const before = clock.now();
    let cancelledFired = false;
    const h = clock.setTimeout(() => (cancelledFired = true), 1);
    clock.clearTimeout(h);
    await new Promise<void>((resolve) => clock.setTimeout(resolve, 5));
    assert.equal(cancelledFired, false);
    assert.ok(clock.now() >= before);
  });
});

describe("TokenBucket", () => {
  it("starts full, refills one token per period, caps at burst", () => {
    const b = new TokenBucket(1000, 2, 0);
    assert.equal(b.tryAccept(0), true);
    assert.equal(b.tryAccept(0), true);
    assert.equal(b.tryAccept(999), false);
    assert.equal(b.tryAccept(1000), true);
    assert.equal(b.tryAccept(1000), false);
    assert.equal(b.tryAccept(10_000), true, "long idle refills");
    assert.equal(b.tryAccept(10_000), true);
    assert.equal(b.tryAccept(10_000), false, "but only up to burst");
  });

  it("accrues nothing while the clock goes backwards", () => {
    const b = new TokenBucket(1000, 1, 5000);
    assert.equal(b.tryAccept(5000), true);
    assert.equal(b.tryAccept(1000), false);
    assert.equal(b.tryAccept(1999), false);
    assert.equal(b.tryAccept(2000), true);
  });

  it("says how long until the next token without taking one", () => {
    const b = new TokenBucket(200, 1, 0);
    assert.equal(b.msUntilToken(0), 0);
    assert.equal(b.tryAccept(0), true);
    assert.equal(b.msUntilToken(50), 150);
    assert.equal(b.msUntilToken(50), 150, "asking takes nothing");
    assert.equal(b.tryAccept(200), true);
  });

  it("rejects a non-positive period and a burst below 1", () => {
    assert.throws(() => new TokenBucket(0, 1, 0), /period must be a positive number of ms, got 0/);
    assert.throws(() => new TokenBucket(10, 0, 0), /burst must be an integer >= 1, got 0/);
  });
});
