/**
 * Zero-copy relaying for the userspace proxy under Bun on Linux: splice(2) moves a connection's bytes
 * socket → pipe → socket inside the kernel, so they are never copied into the process (Bun's socket
 * `data` callback copies every read into a fresh buffer, and read and write each copy once more). The
 * relaying runs on one worker thread with its own epoll loop, called through `bun:ffi`: the main thread
 * duplicates the two sockets' descriptors and hands them over through a shared command queue, and the
 * worker reports byte counts (at least once a second and when a pair ends) and closed pairs back.
 *
 * Per direction: read from the source into a pipe while the pipe is empty, write the pipe out to the
 * destination; a destination that cannot take more stops the reading (backpressure: the bytes wait in
 * the pipe and the kernel's socket buffers); end of stream from the source shuts down the destination's
 * write half once the pipe is written (half-close). Both directions finished: both sockets closed. An
 * error on either (reset, broken pipe) or a teardown closes all of the pair's descriptors at once.
 */

/** Byte counts of a pair ("in": the first socket's reads). */
type PairCount = (direction: "in" | "out", n: number) => void;

/** What the main thread keeps of a pair handed to the worker. */
export interface SplicedPair {
  /** Closes both sockets at once (a no-op once the pair ended). */
  destroy(): void;
  /** Whether the pair ended (both sockets closed by the worker). */
  readonly ended: boolean;
}

/** Relays pairs of sockets on the splice worker. */
export interface SpliceEngine {
  /**
   * Hands sockets `a` and `b` (descriptors the caller still owns; they are duplicated) to the worker.
   * `onEnd` runs once after both are closed, after the last `count`. Null when the pair cannot be taken
   * (descriptor limit, queue full): the caller relays it itself.
   */
  take(a: number, b: number, count: PairCount, onEnd: () => void): SplicedPair | null;
  /** Pairs taken since the start, and those not ended yet (for tests and logs). */
  pairs(): { readonly taken: number; readonly active: number };
}

/**
 * The shared command queue (an Int32Array): header slots, then a ring of `cap` commands (a power of
 * two) of 4 int32 each: op, pair id, fd a, fd b.
 */
const QUEUE = {
  /** 1 while the worker's loop runs, 0 while it waits for a message. */
  state: 0,
  /** Commands the worker has read. */
  head: 1,
  /** Commands the main thread has written. */
  tail: 2,
  hdr: 4,
  cap: 4096,
  add: 1,
  destroy: 2,
} as const;

/** Messages from the worker: [id, in, out] triples, then the ids of ended pairs. */
interface WorkerReport {
  readonly counts: number[];
  readonly ended: number[];
}

/**
 * The worker's whole program, started from its source text (a blob URL), so it must not refer to
 * anything outside itself.
 */
function spliceWorker(L: typeof QUEUE): void {
  const self = globalThis as unknown as {
    onmessage: ((e: { data: unknown }) => void) | null;
    postMessage(m: unknown): void;
  };
  const EPOLLIN = 0x1, EPOLLOUT = 0x4, EPOLLRDHUP = 0x2000, EPOLLET = 0x80000000;
  const EPOLL_CTL_ADD = 1;
  const SPLICE_F_MOVE = 1, SPLICE_F_NONBLOCK = 2;
  const F_SETPIPE_SZ = 1031;
  const O_NONBLOCK = 0o4000, O_CLOEXEC = 0o2000000;
  const EAGAIN = 11, EINTR = 4;
  const SHUT_WR = 1;
  const PIPE_SIZE = 1 << 20;
  const MAX_EVENTS = 256;
  const REPORT_MS = 1000;
  // struct epoll_event is packed (12 bytes) on x86-64 only.
  const EV_SIZE = (globalThis as unknown as { process: { arch: string } }).process.arch === "x64" ? 12 : 16;
  const EV_DATA = EV_SIZE === 12 ? 4 : 8;

  interface Dir {
    src: number;
    dst: number;
    pr: number;
    pw: number;
    /** Bytes in the pipe. */
    n: number;
    /** Capacity of the pipe. */
    cap: number;
    eof: boolean;
    shut: boolean;
    /** Bytes read, not reported yet. */
    count: number;
  }
  interface Pair {
    id: number;
    ab: Dir;
    ba: Dir;
    done: boolean;
  }

  let q: Int32Array;
  let efd = -1;
  let ep = -1;
  let c: Record<string, (...args: unknown[]) => number>;
  let errnoAt: () => number;
  let ready = false;
  let running = false;
  const byFd = new Map<number, Pair>();
  const pairs = new Map<number, Pair>();
  const ended: number[] = [];
  /** Descriptors of ended pairs, closed right after the report that announces the end. */
  const toClose: number[] = [];
  /** [id, in, out] triples not reported yet. */
  const counts: number[] = [];
  let lastReport = Date.now();
  const evbuf = new Uint8Array(MAX_EVENTS * EV_SIZE);
  const evview = new DataView(evbuf.buffer);
  const one = new Uint8Array(EV_SIZE);
  const oneView = new DataView(one.buffer);
  const eightBytes = new Uint8Array(8);
  const fds = new Int32Array(2);

  const makeDir = (src: number, dst: number): Dir | null => {
    if (c.pipe2(fds, O_NONBLOCK | O_CLOEXEC) !== 0) return null;
    const cap = c.fcntl(fds[1], F_SETPIPE_SZ, PIPE_SIZE);
    return {
      src,
      dst,
      pr: fds[0],
      pw: fds[1],
      n: 0,
      cap: cap > 0 ? cap : 65536,
      eof: false,
      shut: false,
      count: 0,
    };
  };

  const watch = (fd: number, events: number): boolean => {
    oneView.setUint32(0, events >>> 0, true);
    oneView.setInt32(EV_DATA, fd, true);
    oneView.setInt32(EV_DATA + 4, 0, true);
    return c.epoll_ctl(ep, EPOLL_CTL_ADD, fd, one) === 0;
  };

  /** Moves what it can in one direction; false on an error that ends the pair. */
  const pump = (d: Dir): boolean => {
    for (;;) {
      if (d.n > 0) {
        const w = c.splice(d.pr, null, d.dst, null, d.n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (w > 0) {
          d.n -= w;
          continue;
        }
        const e = errnoAt();
        if (w < 0 && e === EINTR) continue;
        return w < 0 && e === EAGAIN; // the destination is full: its EPOLLOUT resumes
      }
      if (d.eof) {
        if (!d.shut) {
          d.shut = true;
          c.shutdown(d.dst, SHUT_WR);
        }
        return true;
      }
      const r = c.splice(d.src, null, d.pw, null, d.cap, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (r > 0) {
        d.n += r;
        d.count += r;
        continue;
      }
      if (r === 0) {
        d.eof = true;
        continue;
      }
      const e = errnoAt();
      if (e === EINTR) continue;
      return e === EAGAIN;
    }
  };

  const end = (p: Pair): void => {
    if (p.done) return;
    p.done = true;
    for (const fd of [p.ab.src, p.ba.src, p.ab.pr, p.ab.pw, p.ba.pr, p.ba.pw]) {
      byFd.delete(fd);
      toClose.push(fd);
    }
    pairs.delete(p.id);
    // The last counts go out in the same report as the end, before it.
    if (p.ab.count > 0 || p.ba.count > 0) counts.push(p.id, p.ab.count, p.ba.count);
    ended.push(p.id);
  };

  const step = (p: Pair): void => {
    if (!pump(p.ab) || !pump(p.ba)) end(p);
    else if (p.ab.shut && p.ba.shut) end(p);
  };

  const add = (id: number, a: number, b: number): void => {
    const ab = makeDir(a, b);
    const ba = ab && makeDir(b, a);
    const p: Pair = { id, ab: ab!, ba: ba!, done: false };
    if (ab === null || ba === null) {
      if (ab !== null) c.close(ab.pr), c.close(ab.pw);
      c.close(a);
      c.close(b);
      ended.push(id);
      return;
    }
    pairs.set(id, p);
    byFd.set(a, p);
    byFd.set(b, p);
    const ev = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    if (!watch(a, ev) || !watch(b, ev)) end(p);
    else step(p);
  };

  const drain = (): void => {
    let head = Atomics.load(q, L.head);
    const tail = Atomics.load(q, L.tail);
    while (head !== tail) {
      const at = L.hdr + (head & (L.cap - 1)) * 4;
      const op = q[at], id = q[at + 1];
      if (op === L.add) add(id, q[at + 2], q[at + 3]);
      else {
        const p = pairs.get(id);
        if (p) end(p);
      }
      head = (head + 1) | 0;
      Atomics.store(q, L.head, head);
    }
  };

  /** Posts the counts (and the ended pairs) once a second, or at once when pairs ended. */
  const report = (force: boolean): void => {
    const now = Date.now();
    if (!force && ended.length === 0 && now - lastReport < REPORT_MS) return;
    lastReport = now;
    for (const p of pairs.values()) {
      if (p.ab.count === 0 && p.ba.count === 0) continue;
      counts.push(p.id, p.ab.count, p.ba.count);
      p.ab.count = p.ba.count = 0;
    }
    if (counts.length > 0 || ended.length > 0) {
      self.postMessage({ counts: counts.splice(0), ended: ended.splice(0) });
    }
    // Closed after the report: whoever sees a connection close finds its bytes counted already.
    for (const fd of toClose) c.close(fd);
    toClose.length = 0;
  };

  const run = (): void => {
    if (running || !ready) return;
    running = true;
    Atomics.store(q, L.state, 1);
    for (;;) {
      drain();
      report(false);
      if (pairs.size === 0) {
        // Idle: back to the event loop (a wake-up message restarts the loop). A command written after
        // the drain but before the state change is seen here, or the writer saw state 1 and wakes us.
        Atomics.store(q, L.state, 0);
        if (Atomics.load(q, L.head) === Atomics.load(q, L.tail)) break;
        Atomics.store(q, L.state, 1);
        continue;
      }
      const n = c.epoll_wait(ep, evbuf, MAX_EVENTS, REPORT_MS);
      for (let i = 0; i < n; i++) {
        const fd = evview.getInt32(i * EV_SIZE + EV_DATA, true);
        if (fd === efd) {
          c.read(efd, eightBytes, 8);
          continue;
        }
        const p = byFd.get(fd);
        if (p !== undefined && !p.done) step(p);
      }
      report(false);
    }
    report(true);
    running = false;
  };

  self.onmessage = (e) => {
    const m = e.data as { q?: SharedArrayBuffer; efd?: number } | number;
    if (typeof m === "object" && m !== null && m.q !== undefined) {
      q = new Int32Array(m.q);
      efd = m.efd!;
      const specifier = ["bun", "ffi"].join(":");
      import(specifier).then((ffi: {
        dlopen(p: string, s: Record<string, { args: string[]; returns: string }>): {
          symbols: Record<string, (...args: unknown[]) => number>;
        };
        read: { i32(p: unknown): number };
      }) => {
        const lib = ffi.dlopen("libc.so.6", {
          epoll_create1: { args: ["i32"], returns: "i32" },
          epoll_ctl: { args: ["i32", "i32", "i32", "ptr"], returns: "i32" },
          epoll_wait: { args: ["i32", "ptr", "i32", "i32"], returns: "i32" },
          splice: { args: ["i32", "ptr", "i32", "ptr", "u64", "u32"], returns: "i32" },
          pipe2: { args: ["ptr", "i32"], returns: "i32" },
          fcntl: { args: ["i32", "i32", "i32"], returns: "i32" },
          shutdown: { args: ["i32", "i32"], returns: "i32" },
          close: { args: ["i32"], returns: "i32" },
          read: { args: ["i32", "ptr", "u64"], returns: "i32" },
          __errno_location: { args: [], returns: "ptr" },
        });
        c = lib.symbols;
        const at = c.__errno_location();
        errnoAt = () => ffi.read.i32(at);
        ep = c.epoll_create1(O_CLOEXEC);
        if (ep < 0 || !watch(efd, EPOLLIN)) throw new Error("splice worker: epoll setup failed");
        ready = true;
        self.postMessage("ready");
        guarded();
      }).catch((err: Error) => self.postMessage(`failed: ${err.message}`));
      return;
    }
    guarded(); // a wake-up: commands wait in the queue
  };

  /** A failure of the loop itself ends every pair here (their descriptors are this thread's to close). */
  const guarded = (): void => {
    try {
      run();
    } catch (err) {
      running = false;
      self.postMessage(`failed: ${(err as Error).message}`);
      for (const p of [...pairs.values()]) end(p);
      report(true);
    }
  };
}

/** The part of bun:ffi the main thread uses. */
interface MainFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: string[]; returns: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => number> };
}

const F_DUPFD_CLOEXEC = 1030;
const EFD_NONBLOCK = 0o4000;
const EFD_CLOEXEC = 0o2000000;

let engine: SpliceEngine | null | undefined;

/**
 * The process's splice engine (started on first use), or null where it cannot run: not Bun, not Linux,
 * no `bun:ffi` or libc, or a worker that failed to start (then every later call is null too).
 */
export function spliceEngine(): SpliceEngine | null {
  if (engine !== undefined) return engine;
  engine = null;
  const g = globalThis as { Bun?: unknown; process?: { platform?: string } };
  if (g.Bun === undefined || g.process?.platform !== "linux") return null;
  try {
    engine = startEngine();
  } catch {
    engine = null;
  }
  return engine;
}

function startEngine(): SpliceEngine {
  const req = (import.meta as unknown as { require: (id: string) => unknown }).require;
  const ffi = req(["bun", "ffi"].join(":")) as MainFfi;
  const c = ffi.dlopen("libc.so.6", {
    fcntl: { args: ["i32", "i32", "i32"], returns: "i32" },
    eventfd: { args: ["u32", "i32"], returns: "i32" },
    write: { args: ["i32", "ptr", "u64"], returns: "i32" },
    close: { args: ["i32"], returns: "i32" },
  }).symbols;
  const efd = c.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) throw new Error("eventfd failed");
  const q = new Int32Array(new SharedArrayBuffer((QUEUE.hdr + QUEUE.cap * 4) * 4));
  const source = `(${spliceWorker.toString()})(${JSON.stringify(QUEUE)});`;
  const url = URL.createObjectURL(new Blob([source], { type: "application/javascript" }));
  const worker = new Worker(url);
  (worker as unknown as { unref?: () => void }).unref?.();
  let failed = false;
  const live = new Map<number, { count: PairCount; onEnd: () => void; pair: { ended: boolean } }>();
  /** Destroy commands that found the queue full. */
  const backlog: number[] = [];
  let nextId = 1;
  let taken = 0;
  const one = new BigUint64Array([1n]);

  const push = (op: number, id: number, a: number, b: number): boolean => {
    const tail = Atomics.load(q, QUEUE.tail);
    if (((tail - Atomics.load(q, QUEUE.head)) | 0) >= QUEUE.cap) return false;
    const at = QUEUE.hdr + (tail & (QUEUE.cap - 1)) * 4;
    q[at] = op;
    q[at + 1] = id;
    q[at + 2] = a;
    q[at + 3] = b;
    Atomics.store(q, QUEUE.tail, (tail + 1) | 0);
    // A running loop sees the eventfd; an idle one needs a message.
    c.write(efd, one, 8);
    if (Atomics.load(q, QUEUE.state) === 0) worker.postMessage(0);
    return true;
  };
  const retryBacklog = () => {
    while (backlog.length > 0 && push(QUEUE.destroy, backlog[0], 0, 0)) backlog.shift();
    if (backlog.length > 0) setTimeout(retryBacklog, 1);
  };

  worker.onmessage = (e: MessageEvent) => {
    const m = e.data as WorkerReport | string;
    if (typeof m === "string") {
      // Later pairs stay with Bun; the worker ends those it had and reports them.
      if (m.startsWith("failed")) failed = true;
      return;
    }
    for (let i = 0; i < m.counts.length; i += 3) {
      const p = live.get(m.counts[i]);
      if (p === undefined) continue;
      if (m.counts[i + 1] > 0) p.count("in", m.counts[i + 1]);
      if (m.counts[i + 2] > 0) p.count("out", m.counts[i + 2]);
    }
    for (const id of m.ended) {
      const p = live.get(id);
      if (p === undefined) continue;
      live.delete(id);
      p.pair.ended = true;
      p.onEnd();
    }
  };
  worker.onerror = () => {
    failed = true;
  };
  worker.postMessage({ q: q.buffer, efd });

  return {
    take(a, b, count, onEnd) {
      if (failed) return null;
      const da = c.fcntl(a, F_DUPFD_CLOEXEC, 0);
      if (da < 0) return null;
      const db = c.fcntl(b, F_DUPFD_CLOEXEC, 0);
      const id = nextId;
      if (db < 0 || !push(QUEUE.add, id, da, db)) {
        c.close(da);
        if (db >= 0) c.close(db);
        return null;
      }
      nextId = (nextId + 1) | 0 || 1;
      const pair = {
        ended: false,
        destroy() {
          if (pair.ended) return;
          if (!push(QUEUE.destroy, id, 0, 0)) {
            backlog.push(id);
            if (backlog.length === 1) setTimeout(retryBacklog, 1);
          }
        },
      };
      live.set(id, { count, onEnd, pair });
      taken++;
      return pair;
    },
    pairs: () => ({ taken, active: live.size }),
  };
}
