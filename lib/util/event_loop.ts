/**
 * Gives the event loop a turn. A chain of awaits on promises that are already settled runs as microtasks
 * only: socket reads, child exits, timers and HTTP requests wait until the whole chain is done. Code that
 * blocks in a synchronous call (a netlink commit, libnftables) and then awaits the next one must come
 * through here between them, or a bounded sequence of such calls holds the loop for all of them at once.
 *
 * A zero timer, not `setImmediate`: under Deno the latter ran without polling for I/O (measured: a child's
 * exit and an HTTP request waited for the whole chain), a timer lets both through under Bun and Deno.
 */
export function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
