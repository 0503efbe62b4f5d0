/**
 * kubeconfig `exec` credential plugins (client.authentication.k8s.io v1 and v1beta1): run the command with
 * KUBERNETES_EXEC_INFO in its environment, read an ExecCredential from stdout, use its token or client
 * certificate, cache it until status.expirationTimestamp, and run the plugin again after a 401.
 * Non-interactive only (edgeproxy runs unattended): the plugin gets no stdin.
 */
import { execFile } from "node:child_process";
import { Buffer } from "node:buffer";
import type { AuthMaterial, Credentials } from "./kubeconfig.ts";

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

/** Runs a command; returns stdout or rejects with an Error carrying the stderr text. */
export type CommandRunner = (
  command: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs: number,
) => Promise<string>;

/** Options of {@link ExecCredentialProvider}. */
export interface ExecCredentialOptions {
  cluster: ExecClusterInfo;
  /** Static client certificate from the same kubeconfig user; a certificate from the plugin replaces it. */
  fallback?: AuthMaterial;
  /** Clock in ms (tests). */
  now?: () => number;
  /** Plugin run timeout (ms, default 60 000). */
  timeoutMs?: number;
  /** Replaces node:child_process (tests). */
  runner?: CommandRunner;
}

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

/** Credentials from an exec plugin; the plugin runs at most once at a time. */
export class ExecCredentialProvider implements Credentials {
  readonly description: string;
  readonly #cfg: ExecConfig;
  readonly #opts: ExecCredentialOptions;
  readonly #now: () => number;
  #cached: ExecCredentialResult | null = null;
  #pending: Promise<AuthMaterial> | null = null;
  /** How many times the plugin ran (tests, logs). */
  runs = 0;

  /** Nothing runs until the first get(). */
  constructor(cfg: ExecConfig, opts: ExecCredentialOptions) {
    this.#cfg = cfg;
    this.#opts = opts;
    this.#now = opts.now ?? (() => Date.now());
    this.description = `exec plugin ${cfg.command}`;
  }

  /** See {@link Credentials.get}. */
  get(): Promise<AuthMaterial> {
    const c = this.#cached;
    if (c && (c.expiresAt === null || this.#now() < c.expiresAt)) {
      return Promise.resolve(this.#merge(c.material));
    }
    this.#pending ??= this.#run().finally(() => (this.#pending = null));
    return this.#pending;
  }

  /** See {@link Credentials.invalidate}. */
  invalidate(): void {
    this.#cached = null;
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
    let stdout: string;
    try {
      stdout = await runner(cfg.command, cfg.args, env, this.#opts.timeoutMs ?? 60_000);
    } catch (e) {
      const hint = cfg.installHint && (e as NodeJS.ErrnoException).code === "ENOENT"
        ? `\n${cfg.installHint}`
        : "";
      throw new Error(`${cfg.origin}: running ${cfg.command}: ${(e as Error).message}${hint}`);
    }
    const res = parseExecCredential(stdout, cfg.apiVersion, cfg.origin);
    this.#cached = res;
    return this.#merge(res.material);
  }
}

/** Runs a plugin with node:child_process (works on Deno and Bun). */
export const runCommand: CommandRunner = (command, args, env, timeoutMs) =>
  new Promise((resolve, reject) => {
    const child = execFile(
      command,
      args,
      { env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 4 << 20, encoding: "utf8" },
      (err, stdout, stderr) => {
        if (err) {
          const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: unknown };
          const why = e.code === "ENOENT"
            ? "command not found"
            : e.killed
            ? `timed out after ${timeoutMs} ms`
            : typeof e.code === "number"
            ? `exit status ${e.code}`
            : e.message;
          const errText = String(stderr ?? "").trim().split("\n").slice(-3).join(" | ");
          const out = new Error(errText ? `${why}: ${errText}` : why) as NodeJS.ErrnoException;
          if (e.code === "ENOENT") out.code = "ENOENT";
          reject(out);
        } else resolve(String(stdout));
      },
    );
    child.stdin?.end();
  });
