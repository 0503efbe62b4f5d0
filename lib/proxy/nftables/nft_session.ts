/**
 * The nft writer with the lowest per-transaction cost measured on nft 1.0.6 (bench/nftables_bench.ts,
 * bench/README.md): under Bun, our own netlink batches (netlink/batch.ts, lib/runtime/nft_batch_socket.ts),
 * which read no kernel state before committing (nft 1.0.6 re-reads every chain and set of the table before
 * every transaction, also in a kept libnftables context: its cache is dropped whenever the ruleset
 * generation moved, and our own commit moves it). Every size goes this way: a first sync's bounded chunks
 * hold the event loop for their kernel commit (up to ~1.4 s each at 10k Services), as long as `nft` would
 * take for them in a child, and give it a turn after each (without one a sequence of them held it
 * throughout: /healthz unanswered and the other family's sync waiting for a whole 10k first sync). A
 * transaction with a statement the encoder does not know, or one the kernel refuses as a batch, goes to
 * libnftables in-process (small ones, under Bun) or `nft -f -` (large ones, and everything under Deno).
 * Transactions run one at a time, in call order; each is atomic (a failing one changes nothing and its
 * error carries the refused statement), and a failure leaves the session usable.
 */
import process from "node:process";
import { type LibNftablesContext, openLibNftables } from "../../runtime/libnftables.ts";
import { runInProcessGroup } from "../../runtime/process_groups.ts";
import { type NftBatchSocket, openNftBatchSocket } from "../../runtime/nft_batch_socket.ts";
import { anonymousSetNamer, type EncodeOptions, NftBatchEncoder } from "./netlink/batch.ts";
import { NftNetlinkUnsupported } from "./netlink/unsupported.ts";
import { releaseMemory, requestCollection } from "../../runtime/memory.ts";
import { yieldToEventLoop } from "../../util/event_loop.ts";
import {
  type NftTransactionText,
  streamedChunks,
  transactionLength,
  transactionString,
} from "./render/transaction.ts";

/**
 * Applies nft transactions: the `run` of the backend's NftRunner (same signature), plus `close`. The
 * backend keeps its `nft` process runner for listings and checks and sends transactions here.
 */
export interface NftTransactionRunner {
  /**
   * Applies `transaction` (nft syntax, one command per line; or chunks of whole lines, in order)
   * atomically; rejects with an {@link NftTransactionError} carrying nft's error text.
   */
  run(transaction: NftTransactionText): Promise<void>;
  /** Waits for the running transaction, then releases the writer; later `run` calls reject. */
  close(): Promise<void>;
}

/** Which writer a transaction went through. */
export type NftWriterKind = "netlink" | "libnftables" | "nft -f -";

/** Options of {@link openNftSession}. */
export interface NftSessionOptions {
  /** The nft binary for the process writer (default "nft"). */
  readonly nftPath?: string;
  /** argv prefix for the process writer, e.g. ["ip", "netns", "exec", "<name>"] (default none). */
  readonly commandPrefix?: readonly string[];
  /** Network namespace file the libnftables context is opened in (default: ours). */
  readonly netnsPath?: string;
  /** Use libnftables when available (default true); false: always `nft -f -`. */
  readonly libnftables?: boolean;
  /**
   * Commit through our own netlink batches when available (default true): no cache read before a
   * transaction. A transaction with a statement the encoder does not know goes to the other writers.
   */
  readonly netlink?: boolean;
  /**
   * Netlink batches byte for byte as nft 1.0.6 writes them (default false: our own anonymous set names
   * and elements by batch id, see NftSession), for comparisons.
   */
  readonly nftIdenticalBatches?: boolean;
  /**
   * The part of this session's anonymous set names that sets them apart from an earlier session's on the
   * same table (a letter, then letters and digits), until a batch is refused. Default: "k" and 3 random
   * characters.
   */
  readonly anonymousSetToken?: string;
  /** Told (at V(4)) of each transaction the netlink encoder handed to the other writers, and why. */
  readonly onFallback?: (reason: string) => void;
  /**
   * Told of each netlink batch the kernel refused (then retried through nft, which either lands it — our
   * encoding differed from nft's — or reports the kernel's reason in its own words). Default: onFallback.
   */
  readonly onRefused?: (reason: string) => void;
  /**
   * Transactions of at least this many bytes that do not go through netlink go to `nft -f -` rather than
   * libnftables (default 256 KiB): they commit for long enough that blocking the event loop on nft's parse
   * and cache read would matter, and a process start is then noise.
   */
  readonly largeTransactionBytes?: number;
  /** Kills an `nft -f -` child after this many ms (default 120 000). */
  readonly timeoutMs?: number;
}

/**
 * Netlink batch bytes sent between two forced collections (see #applyNetlink). Each collection of the
 * agent's heap takes ~50–100 ms at 5k–10k Services: every MiB cost 1.1–1.6 s of a 5k first sync for no
 * lower peak than every 4 MiB. With the encoder writing into one buffer (about a third of the garbage) the
 * collection is still needed: without it the agent's peak at 5k was 379–398 MiB against 303–324, and every
 * 16 MiB gave 14 MiB more in-process (bench/README.md, "nftables netlink encoder without an attribute tree").
 */
export const RELEASE_AFTER_BYTES = 4 * 1024 * 1024;

/**
 * The encoder's buffers are trimmed once no transaction came for this long: a bounded first sync's
 * transactions follow one another closely and reuse them, and the last one's stays no longer.
 */
const TRIM_AFTER_IDLE_MS = 1000;

/** Default size from which a transaction goes to a child process. */
export const NFT_LARGE_TRANSACTION_BYTES = 256 * 1024;

/** A transaction nft refused (or could not be run); the table is as it was before it. */
export class NftTransactionError extends Error {
  constructor(readonly writer: NftWriterKind, readonly nftError: string, readonly transaction: string) {
    const lines = transaction.split("\n").length - 1;
    super(`nft transaction (${lines} commands, ${writer}) failed: ${nftError.trim() || "no error text"}`);
    this.name = "NftTransactionError";
  }
  /** nft said an object does not exist (ENOENT), as the backend's NftError reports it. */
  get notFound(): boolean {
    return /No such file or directory/.test(this.nftError);
  }
}

/**
 * "k" and 3 random base-36 characters: anonymous set names stay within 15 characters (the kernel keeps
 * each name in a 16-byte allocation, and its set-list walks read every name: longer names cost ~5 % more
 * kernel time in a first sync). Two sessions meet with odds of 1 in 46656; the kernel then refuses the
 * batch (NLM_F_EXCL) and the session draws a new token.
 */
function sessionToken(): string {
  const r = crypto.getRandomValues(new Uint32Array(1))[0] % 46656;
  return `k${r.toString(36).padStart(3, "0")}`;
}

/** A session of serialized nft transactions. */
export class NftSession implements NftTransactionRunner {
  #queue: Promise<void> = Promise.resolve();
  #closed = false;
  /** Transactions applied per writer (for logs and benchmarks). */
  readonly counts: Record<NftWriterKind, number> = { "netlink": 0, "libnftables": 0, "nft -f -": 0 };
  /** Transactions the netlink encoder could not translate (they went to libnftables or nft). */
  fallbacks = 0;
  /** Netlink batches the kernel refused (each retried through libnftables or nft). */
  refusedBatches = 0;
  #seq = 1;
  #sentSinceRelease = 0;
  /** Transactions queued or running. */
  #pending = 0;
  /** Trims the encoder's buffers once the session is idle (see TRIM_AFTER_IDLE_MS). */
  #trimTimer: ReturnType<typeof setTimeout> | null = null;
  /** Encodes every batch into the same growing buffer. */
  readonly #encoder = new NftBatchEncoder();
  /**
   * The kernel walks every set of the table for each lookup by name, and parses every set's name to
   * number an anonymous "__map%d": a first sync creating one anonymous map per service port was
   * quadratic in them. Naming them ourselves and addressing new sets' elements by batch id drops two of
   * the five walks per anonymous set. The token keeps the names of this session apart from an earlier
   * agent's still in the table; a new one is drawn after any refused batch.
   */
  #encode: EncodeOptions;

  constructor(
    readonly options: NftSessionOptions,
    readonly lib: LibNftablesContext | null,
    readonly netlink: NftBatchSocket | null = null,
  ) {
    this.#encode = this.#encodeOptions(options.anonymousSetToken ?? sessionToken());
  }

  #encodeOptions(token: string): EncodeOptions {
    if (this.options.nftIdenticalBatches === true) return {};
    return { anonymousSetName: anonymousSetNamer(token), elementsById: true };
  }

  /** The writer small transactions go through. */
  get writer(): NftWriterKind {
    if (this.netlink !== null) return "netlink";
    return this.lib === null ? "nft -f -" : "libnftables";
  }

  /** Applies `transaction` after every earlier one; "" is a no-op. Chunks are not joined for netlink. */
  run(transaction: NftTransactionText): Promise<void> {
    if (this.#closed) return Promise.reject(new Error("nft session is closed"));
    this.#pending++;
    if (this.#trimTimer !== null) clearTimeout(this.#trimTimer);
    this.#trimTimer = null;
    const next = this.#queue.then(() => this.#apply(transaction)).finally(() => this.#settled());
    // A failed transaction must not stop the ones queued after it.
    this.#queue = next.catch(() => {});
    return next;
  }

  /** After a transaction: once none is pending, the encoder's buffers are trimmed a while later. */
  #settled(): void {
    if (--this.#pending > 0 || this.#closed || this.netlink === null) return;
    const timer = setTimeout(() => {
      if (this.#trimTimer === timer) this.#trimTimer = null;
      if (this.#pending === 0) this.#encoder.trim();
    }, TRIM_AFTER_IDLE_MS);
    // Nothing to wait for at exit.
    (timer as { unref?: () => void }).unref?.();
    this.#trimTimer = timer;
  }

  /** Bytes the netlink encoder holds between batches (see TRIM_AFTER_IDLE_MS). */
  get retainedBytes(): number {
    return this.#encoder.retainedBytes;
  }

  async #apply(transaction: NftTransactionText): Promise<void> {
    const length = transactionLength(transaction);
    if (length === 0) return;
    if (this.netlink !== null) {
      let done = false;
      try {
        done = this.#applyNetlink(this.netlink, transaction);
      } catch (e) {
        if (!(e instanceof NftTransactionError)) throw e;
        // The batch changed nothing (atomic). nft gets the same transaction: where the kernel refuses it
        // for a real reason nft reports that in its own words, and should our encoding ever differ from
        // nft's, the change still lands.
        this.refusedBatches++;
        // Should the refusal be a name of ours meeting an earlier session's, the next batch names anew.
        this.#encode = this.#encodeOptions(sessionToken());
        (this.options.onRefused ?? this.options.onFallback)?.(
          `the kernel refused the netlink batch, retried through nft: ${e.nftError}`,
        );
      }
      // Encoding (a rule's tokens, element keys) and the chunks themselves leave garbage that Bun collects
      // lazily: without this the peak RSS of a 5k first sync rose by ~60–90 MiB. Collected here, once a
      // batch is out of scope: fully every few MiB sent, and a young-generation collection asked for after
      // each batch in between (a 10k first sync's peak ~5 MiB lower, no measurable time).
      if (this.#sentSinceRelease >= RELEASE_AFTER_BYTES) {
        this.#sentSinceRelease = 0;
        releaseMemory();
      } else requestCollection();
      if (done) {
        // The commit blocked the loop: let what waited (the other family's sync, /healthz, the watches)
        // run before the caller's next transaction does the same.
        await yieldToEventLoop();
        return;
      }
    }
    const large = length >= (this.options.largeTransactionBytes ?? NFT_LARGE_TRANSACTION_BYTES);
    if (this.lib !== null && !large) {
      const text = transactionString(transaction);
      const r = this.lib.run(text);
      await yieldToEventLoop();
      if (!r.ok) throw new NftTransactionError("libnftables", r.error, text);
      this.counts["libnftables"]++;
      return;
    }
    const argv = [...(this.options.commandPrefix ?? []), this.options.nftPath ?? "nft", "-f", "-"];
    const r = await runInProcessGroup(argv, {
      stdin: streamedChunks(transaction),
      timeoutMs: this.options.timeoutMs ?? 120_000,
      env: { ...process.env, LC_ALL: "C" },
    }).catch((e: Error) => {
      throw new NftTransactionError("nft -f -", e.message, transactionString(transaction));
    });
    if (r.code !== 0) {
      throw new NftTransactionError("nft -f -", r.stderr || r.exit, transactionString(transaction));
    }
    this.counts["nft -f -"]++;
  }

  /**
   * Commits `transaction` as one netlink batch; false when the encoder does not know one of its
   * statements (nothing was sent). Throws an NftTransactionError naming the refused statement.
   */
  #applyNetlink(socket: NftBatchSocket, transaction: NftTransactionText): boolean {
    let batch;
    try {
      batch = this.#encoder.encode(transaction, this.#seq, this.#encode);
    } catch (e) {
      if (!(e instanceof NftNetlinkUnsupported)) throw e;
      this.fallbacks++;
      this.options.onFallback?.(`${e.what} in: ${e.statement}`);
      return false;
    }
    if (batch.messages === 0) return true;
    this.#seq = (batch.lastSeq + 2) % 0x7fffffff || 1;
    let outcome;
    try {
      outcome = socket.commit(batch.bytes, batch.lastSeq);
    } catch (e) {
      // The socket could not take the batch (send buffer, send): nothing was committed.
      throw new NftTransactionError("netlink", (e as Error).message, transactionString(transaction));
    }
    if (outcome.errors.length > 0 || !outcome.acknowledged) {
      const lines = outcome.errors.map((e) =>
        `Error: ${errnoText(e.errno)} (errno ${e.errno}): ${
          clip(batch.statementOf(e.seq) ?? `message ${e.seq}`)
        }`
      );
      if (lines.length === 0) lines.push("Error: the kernel did not acknowledge the batch");
      throw new NftTransactionError("netlink", lines.join("\n"), transactionString(transaction));
    }
    this.counts["netlink"]++;
    this.#sentSinceRelease += batch.bytes.length;
    return true;
  }

  /** Waits for queued transactions, then frees the libnftables context and the netlink socket. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#queue;
    if (this.#trimTimer !== null) clearTimeout(this.#trimTimer);
    this.#trimTimer = null;
    this.lib?.close();
    this.netlink?.close();
  }
}

/** A statement for an error line: merged element commands run to hundreds of KB. */
function clip(statement: string): string {
  return statement.length <= 300 ? statement : `${statement.slice(0, 300)}... (${statement.length} bytes)`;
}

/** strerror of the errnos nf_tables answers with (nft prints the same texts). */
function errnoText(errno: number): string {
  const texts: Record<number, string> = {
    1: "Operation not permitted",
    2: "No such file or directory",
    12: "Cannot allocate memory",
    16: "Device or resource busy",
    17: "File exists",
    22: "Invalid argument",
    28: "No space left on device",
    34: "Numerical result out of range",
    90: "Message too long",
    95: "Operation not supported",
    105: "No buffer space available",
  };
  return texts[errno] ?? "Unknown error";
}

/**
 * Opens a session: our netlink batches when available and allowed, with libnftables in-process (or one
 * `nft -f -` per transaction) for what the encoder does not know and for large transactions of other
 * writers.
 */
export async function openNftSession(options: NftSessionOptions = {}): Promise<NftSession> {
  const lib = options.libnftables === false ? null : await openLibNftables({ netnsPath: options.netnsPath });
  const netlink = options.netlink === false
    ? null
    : await openNftBatchSocket({ netnsPath: options.netnsPath })
      .catch(() => null);
  return new NftSession(options, lib, netlink);
}
