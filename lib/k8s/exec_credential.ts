/**
 * kubeconfig `exec` credential plugins (client.authentication.k8s.io v1 and v1beta1): run the command with
 * KUBERNETES_EXEC_INFO in its environment, read an ExecCredential from stdout, use its token or client
 * certificate, cache it until status.expirationTimestamp, and run the plugin again after a 401.
 * Non-interactive only (edgeproxy runs unattended): the plugin gets no stdin.
 *
 * Not client-node's ExecAuth: it spawns the plugin in our process group with no time limit and no way to
 * stop it, so a plugin that hangs would hold startup, every request and shutdown. Here each run is bounded
 * ({@link EXEC_TIMEOUT_MS}), runs in its own process group, and close() (shutdown) kills that group.
 */
import process from "node:process";
import { Buffer } from "node:buffer";
import type { AuthMaterial, Credentials } from "./credentials.ts";
import { Backoff } from "./backoff.ts";
import { runInProcessGroup, SpawnError } from "../runtime/process_groups.ts";

/** The `exec` stanza of a kubeconfig user, with paths already resolved. */
export interface ExecConfig {
  command: string;
  args: string[];
  /** Extra environment for the plugin (on top of the process environment). */
  env: Record<string, string>;
  apiVersion: "client.authentication.k8s.io/v1" | "client.authentication.k8s.io/v1beta1" | string;
  provideClusterInfo: boolean;
  installHint?: string;
  /** "kubeconfig /path: users[0].user.exec", for messages. */
  origin: string;
}

/** Cluster facts passed to plugins that ask for them (provideClusterInfo). */
export interface ExecClusterInfo {
  server: string;
  caPem?: string;
  insecureSkipTlsVerify: boolean;
}

/**
 * Runs a command; returns stdout or rejects with an Error carrying the stderr text. `signal` aborts the
 * run (the command and everything it started are killed).
 */
export type CommandRunner = (
  command: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs: number,
  signal: AbortSignal,
) => Promise<string>;

/** Options of {@link ExecCredentialProvider}. */
export interface ExecCredentialOptions {
  cluster: ExecClusterInfo;
  /** Static client certificate from the same kubeconfig user; a certificate from the plugin replaces it. */
  fallback?: AuthMaterial;
  /** Clock in ms (tests). */
  now?: () => number;
  /** Plugin run time limit (ms, default {@link EXEC_TIMEOUT_MS}); past it the plugin's process group is killed. */
  timeoutMs?: number;
  /** Wait after failed runs before the plugin runs again (default: 1 s doubling to 30 s). */
  backoff?: Backoff;
  /** Replaces {@link runCommand} (tests). */
  runner?: CommandRunner;
}

/**
 * How long one plugin run may take. client-go has no limit; a plugin that never returns would then hold
 * every request (and, before this bound, shutdown) forever. Real plugins answer in seconds.
 */
export const EXEC_TIMEOUT_MS = 30_000;

/** A parsed ExecCredential response. */
export interface ExecCredentialResult {
  material: AuthMaterial;
  /** ms since epoch; null = valid until the apiserver rejects it. */
  expiresAt: number | null;
}

/**
 * Parses and validates a plugin's stdout. Throws an Error naming `origin` and the offending field.
 */
export function parseExecCredential(
  stdout: string,
  apiVersion: string,
  origin: string,
): ExecCredentialResult {
  let doc: unknown;
  try {
    doc = JSON.parse(stdout);
  } catch {
    throw new Error(`${origin}: plugin output is not JSON: ${JSON.stringify(stdout.slice(0, 120))}`);
  }
  if (typeof doc !== "object" || doc === null) throw new Error(`${origin}: plugin output is not an object`);
  const d = doc as Record<string, unknown>;
  if (d.kind !== "ExecCredential") {
    throw new Error(`${origin}: plugin output kind is ${JSON.stringify(d.kind)}, want "ExecCredential"`);
  }
  if (d.apiVersion !== apiVersion) {
    throw new Error(
      `${origin}: plugin output apiVersion is ${JSON.stringify(d.apiVersion)}, want "${apiVersion}"`,
    );
  }
  const st = d.status;
  if (typeof st !== "object" || st === null) throw new Error(`${origin}: plugin output has no status`);
  const s = st as Record<string, unknown>;
  const token = typeof s.token === "string" ? s.token : "";
  const cert = typeof s.clientCertificateData === "string" ? s.clientCertificateData : "";
  const key = typeof s.clientKeyData === "string" ? s.clientKeyData : "";
  if (!token && !cert) {
    throw new Error(`${origin}: plugin output status has neither token nor clientCertificateData`);
  }
  if (Boolean(cert) !== Boolean(key)) {
    throw new Error(`${origin}: plugin output status needs both clientCertificateData and clientKeyData`);
  }
  let expiresAt: number | null = null;
  if (s.expirationTimestamp !== undefined && s.expirationTimestamp !== null) {
    const t = typeof s.expirationTimestamp === "string" ? Date.parse(s.expirationTimestamp) : NaN;
    if (Number.isNaN(t)) {
      throw new Error(
        `${origin}: plugin output status.expirationTimestamp ${
          JSON.stringify(s.expirationTimestamp)
        } is not RFC 3339`,
      );
    }
    expiresAt = t;
  }
  const material: AuthMaterial = {};
  if (token) material.authorization = `Bearer ${token}`;
  if (cert) {
    material.certPem = cert;
    material.keyPem = key;
  }
  return { material, expiresAt };
}

/**
 * Credentials from an exec plugin; the plugin runs at most once at a time, at most `timeoutMs` per run,
 * and after a failure not again before a backoff delay (callers in that window get the last error at once).
 */
export class ExecCredentialProvider implements Credentials {
  readonly description: string;
  readonly #cfg: ExecConfig;
  readonly #opts: ExecCredentialOptions;
  readonly #now: () => number;
  readonly #backoff: Backoff;
  readonly #closing = new AbortController();
  #cached: ExecCredentialResult | null = null;
  #pending: Promise<AuthMaterial> | null = null;
  #failure: { error: Error; retryAt: number } | null = null;
  /** How many times the plugin ran (tests, logs). */
  runs = 0;

  /** Nothing runs until the first get(). */
  constructor(cfg: ExecConfig, opts: ExecCredentialOptions) {
    this.#cfg = cfg;
    this.#opts = opts;
    this.#now = opts.now ?? (() => Date.now());
    this.#backoff = opts.backoff ?? new Backoff({ initialMs: 1_000, maxMs: 30_000, now: this.#now });
    this.description = `exec plugin ${cfg.command}`;
  }

  /** See {@link Credentials.get}. */
  get(): Promise<AuthMaterial> {
    if (this.#closing.signal.aborted) return Promise.reject(this.#closedError());
    const c = this.#cached;
    if (c && (c.expiresAt === null || this.#now() < c.expiresAt)) {
      return Promise.resolve(this.#merge(c.material));
    }
    const f = this.#failure;
    if (!this.#pending && f && this.#now() < f.retryAt) return Promise.reject(f.error);
    this.#pending ??= this.#run().finally(() => (this.#pending = null));
    return this.#pending;
  }

  /** See {@link Credentials.invalidate}. */
  invalidate(): void {
    this.#cached = null;
  }

  /** See {@link Credentials.close}: kills a running plugin's process group; get() rejects from now on. */
  close(): void {
    this.#closing.abort(this.#closedError());
  }

  #closedError(): Error {
    return new Error(`${this.#cfg.origin}: credentials closed (shutting down)`);
  }

  #merge(m: AuthMaterial): AuthMaterial {
    const fb = this.#opts.fallback ?? {};
    return m.certPem ? { ...m } : { ...fb, ...m };
  }

  async #run(): Promise<AuthMaterial> {
    const cfg = this.#cfg;
    const spec: Record<string, unknown> = { interactive: false };
    if (cfg.provideClusterInfo) {
      const cl = this.#opts.cluster;
      const cluster: Record<string, unknown> = { server: cl.server };
      if (cl.caPem) cluster["certificate-authority-data"] = Buffer.from(cl.caPem).toString("base64");
      if (cl.insecureSkipTlsVerify) cluster["insecure-skip-tls-verify"] = true;
      spec.cluster = cluster;
    }
    const info = JSON.stringify({ apiVersion: cfg.apiVersion, kind: "ExecCredential", spec });
    const env = { ...cfg.env, KUBERNETES_EXEC_INFO: info };
    const runner = this.#opts.runner ?? runCommand;
    this.runs++;
    try {
      let stdout: string;
      try {
        stdout = await runner(
          cfg.command,
          cfg.args,
          env,
          this.#opts.timeoutMs ?? EXEC_TIMEOUT_MS,
          this.#closing.signal,
        );
      } catch (e) {
        if (this.#closing.signal.aborted) throw this.#closedError();
        const hint = cfg.installHint && (e as NodeJS.ErrnoException).code === "ENOENT"
          ? `\n${cfg.installHint}`
          : "";
        throw new Error(`${cfg.origin}: running ${cfg.command}: ${(e as Error).message}${hint}`);
      }
      const res = parseExecCredential(stdout, cfg.apiVersion, cfg.origin);
      this.#cached = res;
      this.#failure = null;
      this.#backoff.reset();
      return this.#merge(res.material);
    } catch (e) {
      this.#failure = { error: e as Error, retryAt: this.#now() + this.#backoff.next() };
      throw e;
    }
  }
}

/**
 * Runs a plugin with the one spawner (node:child_process, works on Deno and Bun) in its own process
 * group, stdin closed. On timeout or abort the whole group is killed with SIGKILL (a plugin is often a
 * shell script whose children would otherwise outlive it); stdout is capped at 4 MiB.
 */
export const runCommand: CommandRunner = async (command, args, env, timeoutMs, signal) => {
  let r;
  try {
    r = await runInProcessGroup([command, ...args], {
      env: { ...process.env, ...env },
      timeoutMs,
      signal,
      maxStdoutBytes: MAX_OUTPUT_BYTES,
    });
  } catch (e) {
    if (!(e instanceof SpawnError)) throw e; // the signal's reason: aborted before the run
    const err = new Error(
      e.code === "ENOENT" ? "command not found" : (e.cause as Error).message,
    ) as NodeJS.ErrnoException;
    if (e.code === "ENOENT") err.code = "ENOENT";
    throw err;
  }
  if (r.killed === null && r.code === 0) return r.stdout.toString("utf8");
  const tail = r.stderr.trim().split("\n").slice(-3).join(" | ");
  throw new Error(tail ? `${r.exit}: ${tail}` : r.exit);
};

const MAX_OUTPUT_BYTES = 4 << 20;
