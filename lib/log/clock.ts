/**
 * Wall-clock time with microseconds for log headers (klog prints `hh:mm:ss.uuuuuu`; Date has only
 * milliseconds). performance.now() has microseconds but is monotonic, so it is anchored to Date.now()
 * and re-anchored whenever the two drift apart by more than a millisecond (NTP steps, suspend).
 */

let anchor = Date.now() - performance.now();

/** Microseconds since the Unix epoch, as an integer. */
export function wallMicros(): number {
  const now = performance.now();
  const wall = Date.now();
  let t = anchor + now;
  if (Math.abs(t - wall) > 1) {
    anchor = wall - now;
    t = wall;
  }
  return Math.floor(t * 1000);
}
