/**
 * BoundedFrequencyRunner, ported from upstream pkg/util/async/bounded_frequency_runner_test.go: the same
 * timelines (minInterval 1s, maxInterval 10s), checked on a FakeClock. Upstream watches the fake timer's
 * Stop/Reset calls; here each step checks whether the function ran and where the runner's single timer
 * now points (FakeClock.nextTimerIn).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { FakeClock } from "../../../../lib/runtime/clock.ts";
import { BoundedFrequencyRunner } from "../../../../lib/proxy/runner/bounded_frequency_runner.ts";

const minInterval = 1000;
const maxInterval = 10_000;

/** Lets queued microtasks and the runner's event handling finish (real macrotasks, no fake time). */
async function settle(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 0));
}

class Receiver {
  runs = 0;
  retryFn: (() => void) | null = null;
  f = (): void => {
    this.runs++;
    const retry = this.retryFn;
    this.retryFn = null;
    retry?.();
  };
  /** Returns whether the function ran since the last call, and resets. */
  reset(): boolean {
    const ran = this.runs > 0;
    assert.ok(this.runs <= 1, `function ran ${this.runs} times, expected at most once`);
    this.runs = 0;
    return ran;
  }
}

interface Harness {
  clock: FakeClock;
  obj: Receiver;
  runner: BoundedFrequencyRunner;
  loopDone: Promise<void>;
}

async function start(burst: number): Promise<Harness> {
  const clock = new FakeClock();
  const obj = new Receiver();
  const runner = new BoundedFrequencyRunner({
    name: "test-runner",
    fn: obj.f,
    minIntervalMs: minInterval,
    maxIntervalMs: maxInterval,
    burstRuns: burst,
    clock,
  });
  const loopDone = runner.loop();
  await settle();
  // Initial timer is set to maxInterval; nothing ran.
  assert.equal(clock.nextTimerIn(), maxInterval, "init: timer");
  assert.equal(obj.reset(), false, "init: no run");
  return { clock, obj, runner, loopDone };
}

async function expectRun(h: Harness, step: string): Promise<void> {
  await settle();
  assert.equal(h.obj.reset(), true, `${step}: function should have been called`);
  assert.equal(h.clock.nextTimerIn(), maxInterval, `${step}: timer reset to maxInterval`);
  assert.equal(h.clock.pendingCount(), 1, `${step}: exactly one timer`);
}

async function expectDefer(h: Harness, step: string, next: number): Promise<void> {
  await settle();
  assert.equal(h.obj.reset(), false, `${step}: function should not have been called`);
  assert.equal(h.clock.nextTimerIn(), next, `${step}: timer`);
  assert.equal(h.clock.pendingCount(), 1, `${step}: exactly one timer`);
}

async function expectNothing(h: Harness, step: string, next: number): Promise<void> {
  await expectDefer(h, step, next);
}

async function finish(h: Harness): Promise<void> {
  await h.runner.stop();
  await h.loopDone;
  assert.equal(h.clock.pendingCount(), 0, "stop clears the timer");
}

describe("BoundedFrequencyRunner (upstream timelines)", () => {
  it("no burst", async () => {
    const h = await start(1);
    const { clock, runner } = h;

    runner.run(); // rel=0
    await expectRun(h, "first run");

    clock.advance(500); // rel=500
    runner.run();
    await expectDefer(h, "too soon after first", 500);

    clock.advance(499); // rel=999
    runner.run();
    await expectDefer(h, "still too soon after first", 1);

    clock.advance(1); // rel=1000
    await expectRun(h, "second run");

    runner.run();
    await expectDefer(h, "too soon after second", 1000);

    clock.advance(1); // rel=1
    runner.run();
    await expectDefer(h, "still too soon after second", 999);

    clock.advance(998); // rel=999
    await expectNothing(h, "premature", 1);

    clock.advance(1); // rel=1000
    await expectRun(h, "third run");

    clock.advance(1000); // rel=1000, nothing queued
    await expectNothing(h, "minInterval", 9000);

    clock.advance(9000); // rel=10000
    await expectRun(h, "maxInterval");

    clock.advance(1); // rel=1
    runner.run();
    await expectDefer(h, "too soon after maxInterval run", 999);

    clock.advance(999); // rel=1000
    await expectRun(h, "fifth run");

    await finish(h);
  });

  it("burst 2", async () => {
    const h = await start(2);
    const { clock, runner } = h;

    runner.run(); // abs=0
    await expectRun(h, "first run");

    clock.advance(1); // abs=1: burst allows a second run
    runner.run();
    await expectRun(h, "second run");

    clock.advance(498); // abs=499, rel=498
    runner.run();
    await expectDefer(h, "too soon after second", 502);

    clock.advance(1); // abs=500
    runner.run();
    await expectDefer(h, "too soon after second 2", 501);

    clock.advance(1); // abs=501
    runner.run();
    await expectDefer(h, "too soon after second 3", 500);

    // Enough to replenish one burst token, not minInterval after the last run.
    clock.advance(499); // abs=1000, rel=999
    await expectNothing(h, "not minInterval", 1);
    runner.run();
    await expectRun(h, "third run");

    clock.advance(1); // abs=1001
    runner.run();
    await expectDefer(h, "too soon after third", 999);

    clock.advance(998); // abs=1999
    runner.run();
    await expectDefer(h, "too soon after third 2", 1);

    clock.advance(1); // abs=2000
    await expectRun(h, "fourth run");

    clock.advance(2000); // abs=4000: burst fully replenished
    runner.run();
    await expectRun(h, "fifth run");
    runner.run();
    await expectRun(h, "sixth run");
    runner.run();
    await expectDefer(h, "too soon after sixth", 1000);

    clock.advance(1000); // abs=5000
    await expectRun(h, "seventh run");

    clock.advance(10_000); // abs=15000
    await expectRun(h, "maxInterval");

    await finish(h);
  });

  it("retryAfter", async () => {
    const h = await start(1);
    const { clock, runner, obj } = h;

    // Run once, immediately, and queue a retry from inside the function.
    obj.retryFn = () => runner.retryAfter(5000);
    runner.run();
    await settle();
    assert.equal(obj.reset(), true, "first run");
    assert.equal(clock.nextTimerIn(), 5000, "first run: retry shortens the timer");

    clock.advance(1000);
    await expectNothing(h, "minInterval, nothing queued", 4000);

    clock.advance(4000); // rel=5000
    await expectRun(h, "retry");

    clock.advance(499);
    runner.run();
    await expectDefer(h, "too soon after retry", 501);

    // The deferred run fires; a retry is requested (from outside) before it has been handled.
    clock.advance(501);
    runner.retryAfter(5000);
    await settle();
    assert.equal(obj.reset(), true, "second run");
    assert.equal(clock.nextTimerIn(), 5000, "second run: retry applied after the run");

    clock.advance(1000);
    await expectNothing(h, "minInterval, nothing queued", 4000);

    runner.run();
    await expectRun(h, "third run");

    // The retry was satisfied by the third run.
    clock.advance(4000);
    await expectNothing(h, "retry cancelled", 6000);

    // Queue a retry asynchronously, after the function has returned.
    obj.retryFn = () => setTimeout(() => runner.retryAfter(5000), 5);
    runner.run();
    await new Promise((r) => setTimeout(r, 20));
    await settle();
    assert.equal(obj.reset(), true, "fourth run");
    assert.equal(clock.nextTimerIn(), 5000, "fourth run: late retry");

    clock.advance(100);
    runner.run();
    await expectDefer(h, "too soon after fourth run", 900);

    clock.advance(900);
    await expectRun(h, "fifth run");

    clock.advance(4000); // 5s since retryAfter: cancelled by the fifth run
    await expectNothing(h, "retry cancelled", 6000);

    clock.advance(5000);
    await expectNothing(h, "premature", 1000);
    clock.advance(1000);
    await expectRun(h, "maxInterval");

    await finish(h);
  });
});

describe("BoundedFrequencyRunner (event-loop specifics)", () => {
  it("awaits an async function, never runs it concurrently, and coalesces requests made meanwhile", async () => {
    const clock = new FakeClock();
    let active = 0;
    let maxActive = 0;
    let runs = 0;
    let release: () => void = () => {};
    const fn = async () => {
      runs++;
      active++;
      maxActive = Math.max(maxActive, active);
      await new Promise<void>((r) => (release = r));
      active--;
    };
    const runner = new BoundedFrequencyRunner({
      name: "async",
      fn,
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 2,
      clock,
    });
    const done = runner.loop();
    runner.run();
    await settle();
    assert.equal(runs, 1);
    // Three requests while the first run is in flight: one follow-up run, not three.
    runner.run();
    runner.run();
    runner.run();
    await settle();
    assert.equal(runs, 1, "no second run while the first is in flight");
    release();
    await settle();
    assert.equal(runs, 2, "one coalesced follow-up (burst 2)");
    release();
    await settle();
    assert.equal(runs, 2);
    assert.equal(maxActive, 1);
    assert.equal(clock.nextTimerIn(), 10_000);
    await runner.stop();
    await done;
  });

  it("a follow-up request during a run is deferred to minInterval when the burst is spent", async () => {
    const clock = new FakeClock();
    let runs = 0;
    const runner = new BoundedFrequencyRunner({
      name: "defer",
      fn: () => {
        runs++;
        if (runs === 1) runner.run(); // a change arrives while syncing
      },
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      clock,
    });
    const done = runner.loop();
    runner.run();
    await settle();
    assert.equal(runs, 1);
    assert.equal(clock.nextTimerIn(), 1000, "the request made during the run waits for minInterval");
    clock.advance(1000);
    await settle();
    assert.equal(runs, 2);
    await runner.stop();
    await done;
  });

  it("a throttled request never postpones a timer that is already sooner", async () => {
    const clock = new FakeClock();
    let runs = 0;
    const runner = new BoundedFrequencyRunner({
      name: "sooner",
      fn: () => void runs++,
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      clock,
    });
    const done = runner.loop();
    runner.run();
    await settle();
    runner.retryAfter(200);
    await settle();
    assert.equal(clock.nextTimerIn(), 200);
    runner.run(); // throttled until 1000, but the timer at 200 stays
    await settle();
    assert.equal(clock.nextTimerIn(), 200);
    clock.advance(200); // fires; still throttled: deferred to minInterval after the run
    await settle();
    assert.equal(runs, 1);
    assert.equal(clock.nextTimerIn(), 800);
    clock.advance(800);
    await settle();
    assert.equal(runs, 2);
    await runner.stop();
    await done;
  });

  it("keeps looping after the function throws", async () => {
    const clock = new FakeClock();
    let runs = 0;
    const runner = new BoundedFrequencyRunner({
      name: "throws",
      fn: () => {
        runs++;
        throw new Error("sync failed on purpose");
      },
      minIntervalMs: 0,
      maxIntervalMs: 5000,
      burstRuns: 1,
      clock,
    });
    const done = runner.loop();
    runner.run();
    await settle();
    runner.run();
    await settle();
    assert.equal(runs, 2, "minInterval 0: every request runs");
    clock.advance(5000);
    await settle();
    assert.equal(runs, 3, "periodic run still happens");
    await runner.stop();
    await done;
  });

  it("a request made before loop() runs once the loop starts; requests after stop() are ignored", async () => {
    const clock = new FakeClock();
    let runs = 0;
    const runner = new BoundedFrequencyRunner({
      name: "early",
      fn: () => void runs++,
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 2,
      clock,
    });
    runner.run();
    await settle();
    assert.equal(runs, 0, "no loop, no run");
    const done = runner.loop();
    await settle();
    assert.equal(runs, 1);
    await runner.stop();
    await done;
    runner.run();
    runner.retryAfter(1);
    clock.advance(20_000);
    await settle();
    assert.equal(runs, 1);
    assert.equal(clock.pendingCount(), 0);
    assert.throws(() => runner.loop(), /loop\(\) called twice, or after stop\(\)/);
  });

  it("stop() waits for the run in progress", async () => {
    const clock = new FakeClock();
    let finished = false;
    let release: () => void = () => {};
    const runner = new BoundedFrequencyRunner({
      name: "stop",
      fn: async () => {
        await new Promise<void>((r) => (release = r));
        finished = true;
      },
      minIntervalMs: 1000,
      maxIntervalMs: 10_000,
      burstRuns: 1,
      clock,
    });
    const done = runner.loop();
    runner.run();
    await settle();
    let stopped = false;
    const stopping = runner.stop().then(() => (stopped = true));
    await settle();
    assert.equal(stopped, false, "still running");
    release();
    await stopping;
    await done;
    assert.equal(finished, true);
    assert.equal(clock.pendingCount(), 0, "no timer re-armed after stop");
  });

  it("rejects bad intervals like upstream's constructor", () => {
    const base = { name: "bad", fn: () => {}, burstRuns: 1, clock: new FakeClock() };
    assert.throws(
      () => new BoundedFrequencyRunner({ ...base, minIntervalMs: 2000, maxIntervalMs: 1000 }),
      /bad: maxInterval \(1000ms\) must be finite and >= minInterval \(2000ms\)/,
    );
    assert.throws(
      () => new BoundedFrequencyRunner({ ...base, minIntervalMs: -1, maxIntervalMs: 1000 }),
      /minInterval/,
    );
    assert.throws(
      () => new BoundedFrequencyRunner({ ...base, minIntervalMs: 1, maxIntervalMs: 10, burstRuns: 0 }),
      /burstRuns must be an integer >= 1, got 0/,
    );
  });
});
