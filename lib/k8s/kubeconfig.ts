/**
 * Where the apiserver is and how to authenticate: kubeconfig files, in-cluster service-account
 * configuration and the --master override, resolved into a {@link RestConfig} for our own transport
 * (lib/k8s/transport.ts). kubeconfig entries are parsed and checked by @kubernetes/client-node's entry
 * parsers (newClusters, newUsers, newContexts) into its Cluster/User/Context model; its API clients and
 * Watch are not used (on Deno they hang, on Bun they drop the TLS options), so only the resolved server,
 * CA, client certificate, token and TLS flags leave this module.
 *
 * Precedence, as upstream kube-proxy (cmd/kube-proxy/app/server.go createClient) plus KUBECONFIG:
 * 1. an explicit kubeconfig path (--kubeconfig / clientConnection.kubeconfig), alone;
 * 2. else the files in $KUBECONFIG (colon-separated, merged);
 * 3. else, with --master, that URL with no credentials;
 * 4. else in-cluster (KUBERNETES_SERVICE_HOST/PORT and the service-account token and CA).
 * --master overrides the server URL in every case.
 *
 * Where client-node differs from client-go, client-go wins (each place says why): KUBECONFIG merging,
 * `tokenFile`, token-file rotation, certificate-*-data precedence, exec plugins.
 * Every problem is a {@link KubeconfigError}: one line naming the file and the field.
 */
import { readFile } from "node:fs/promises";
import { dirname, isAbsolute, resolve } from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { parse as parseYaml } from "yaml";
import { readFileSync } from "node:fs";
// Only the entry parsers: the package's root (KubeConfig, which pulls the generated API client, undici,
// openid-client, socks and proxy agents) adds ~6 MiB of resident memory and ~4 MB of binary for the
// agent's lifetime, for a loader that would otherwise be a find-by-name.
import {
  type Cluster,
  type Context,
  newClusters,
  newContexts,
  newUsers,
  type User,
} from "@kubernetes/client-node/dist/config_types.js";
import { type ExecConfig, ExecCredentialProvider } from "./exec_credential.ts";
import { KubeconfigError } from "./kubeconfig_error.ts";
import type { AuthMaterial, Credentials } from "./credentials.ts";
import { joinHostPort } from "../net/go_net.ts";

export { KubeconfigError };
export type { AuthMaterial, Credentials };

/** Everything needed to talk to one apiserver. */
export interface RestConfig {
  /** Base URL, without trailing slash (may carry a path prefix). */
  server: string;
  /** Cluster CA (PEM), if any. */
  caPem?: string;
  /** kubeconfig insecure-skip-tls-verify. */
  insecureSkipTlsVerify: boolean;
  credentials: Credentials;
  /** Where this came from, for logs: "kubeconfig /a (context c)", "in-cluster", "--master". */
  source: string;
}

/** Inputs of {@link loadRestConfig}; everything but the first two is for tests. */
export interface LoadRestConfigOptions {
  /** --kubeconfig or clientConnection.kubeconfig ("" = not given). */
  kubeconfig?: string;
  /** --master ("" = not given). */
  master?: string;
  /**
   * Environment to read KUBECONFIG from (default: process.env). The in-cluster variables are always read
   * from process.env.
   */
  env?: Record<string, string | undefined>;
  /** Prefix of the service-account mount path (default "": /var/run/secrets/kubernetes.io/serviceaccount). */
  inClusterRoot?: string;
  /** How often token files are re-read (ms, default 60 000), so rotated bound tokens are picked up. */
  tokenRefreshMs?: number;
  /** Clock in ms (tests). */
  now?: () => number;
}

/** Default service-account mount. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** Bound on YAML alias expansion in a kubeconfig (the `yaml` package's default, made explicit). */
const MAX_ALIAS_COUNT = 100;

/**
 * Loads the apiserver connection following the precedence in this module's header.
 * @throws KubeconfigError naming the file (or setting) and the field
 */
export async function loadRestConfig(opts: LoadRestConfigOptions = {}): Promise<RestConfig> {
  const env = opts.env ?? (process.env as Record<string, string | undefined>);
  const master = (opts.master ?? "").trim();
  const explicit = (opts.kubeconfig ?? "").trim();
  let cfg: RestConfig;
  if (explicit) {
    cfg = await restConfigFromKubeconfigFiles([explicit], { ...opts, requireAll: true });
  } else if ((env.KUBECONFIG ?? "").trim()) {
    const paths = env.KUBECONFIG!.split(":").map((p) => p.trim()).filter((p) => p !== "");
    cfg = await restConfigFromKubeconfigFiles(paths, { ...opts, requireAll: false });
  } else if (master) {
    cfg = { server: "", insecureSkipTlsVerify: false, credentials: noCredentials(), source: "--master" };
  } else {
    cfg = await inClusterConfig(opts);
  }
  if (master) {
    cfg.server = normalizeServer(master, "--master", "");
    if (cfg.source !== "--master") cfg.source += " with --master";
  }
  return cfg;
}

// ---------------------------------------------------------------------------------------------------------
// kubeconfig files

/** Where a merged entry came from, for messages: its file and its field ("clusters[0].cluster"). */
interface Origin {
  file: string;
  field: string;
}

/** The merged kubeconfig: client-node's model plus what client-node drops. */
export interface MergedKubeconfig {
  files: string[];
  /** client-node's entries, merged; current-context from the first file that sets it. */
  currentContext: string;
  clusterList: Cluster[];
  userList: User[];
  contextList: Context[];
  /** The file that set current-context. */
  currentContextFile: string;
  clusters: Map<string, Origin>;
  users: Map<string, Origin & { tokenFile?: string }>;
  contexts: Map<string, Origin>;
}

/**
 * Parses kubeconfig texts and merges them with kubectl's rules: for clusters, users and contexts the first
 * file defining a name wins; current-context comes from the first file that sets it. (client-node's
 * loadFromDefault/mergeConfig throws on a name defined twice, lets the last current-context win and fails
 * on a missing KUBECONFIG entry, none of which kubectl does.) Each file is parsed with the `yaml` package
 * (bounded alias expansion, line numbers in errors) and its entries modelled by client-node's parsers.
 * Relative paths are resolved against the file that names them.
 */
export function mergeKubeconfigs(docs: Array<{ file: string; text: string }>): MergedKubeconfig {
  const out: MergedKubeconfig = {
    files: docs.map((d) => d.file),
    currentContext: "",
    clusterList: [],
    userList: [],
    contextList: [],
    currentContextFile: "",
    clusters: new Map(),
    users: new Map(),
    contexts: new Map(),
  };
  const { clusterList: clusters, userList: users, contextList: contexts } = out;
  for (const { file, text } of docs) {
    const where = `kubeconfig ${file}`;
    let doc: unknown;
    try {
      doc = parseYaml(text, { maxAliasCount: MAX_ALIAS_COUNT });
    } catch (e) {
      throw new KubeconfigError(where, "", `not valid YAML: ${firstLine(e)}`);
    }
    if (doc === null || doc === undefined) continue; // an empty file is allowed, as in kubectl
    if (!isRecord(doc)) throw new KubeconfigError(where, "", "not a YAML mapping");
    const cc = doc["current-context"];
    if (cc !== undefined && cc !== null && typeof cc !== "string") {
      throw new KubeconfigError(where, "current-context", "must be a string");
    }
    for (const list of ["clusters", "users", "contexts"]) {
      const v = doc[list];
      if (v === undefined || v === null) continue;
      if (!Array.isArray(v)) throw new KubeconfigError(where, list, "must be a list");
      v.forEach((e, i) => {
        if (!isRecord(e)) throw new KubeconfigError(where, `${list}[${i}]`, "must be a mapping");
      });
    }
    let one: { clusters: Cluster[]; users: User[]; contexts: Context[] };
    try {
      one = {
        clusters: newClusters(doc.clusters),
        users: newUsers(doc.users),
        contexts: newContexts(doc.contexts),
      };
    } catch (e) {
      // client-node's messages name the entry: "clusters[0].cluster.server is missing".
      throw new KubeconfigError(where, "", firstLine(e));
    }
    // Relative paths are relative to the file that names them (client-node's makePathsAbsolute).
    for (const c of one.clusters) if (c.caFile) c.caFile = resolveRelative(c.caFile, file);
    for (const u of one.users) {
      if (u.certFile) u.certFile = resolveRelative(u.certFile, file);
      if (u.keyFile) u.keyFile = resolveRelative(u.keyFile, file);
    }
    if (!out.currentContext && cc) {
      out.currentContext = cc;
      out.currentContextFile = file;
    }
    const rawUsers = (doc.users ?? []) as Array<Record<string, unknown>>;
    one.clusters.forEach((c, i) => {
      if (out.clusters.has(c.name)) return;
      out.clusters.set(c.name, { file, field: `clusters[${i}].cluster` });
      clusters.push(c);
    });
    one.users.forEach((u, i) => {
      if (out.users.has(u.name)) return;
      const field = `users[${i}].user`;
      const raw = rawUsers[i]?.user;
      // client-go's `tokenFile`; client-node's User has no such field (it reads a `token-file` once).
      const tf = isRecord(raw) ? raw.tokenFile : undefined;
      if (tf !== undefined && tf !== null && typeof tf !== "string") {
        throw new KubeconfigError(where, `${field}.tokenFile`, "must be a string");
      }
      out.users.set(u.name, { file, field, tokenFile: tf ? resolveRelative(tf, file) : undefined });
      users.push(u);
    });
    one.contexts.forEach((c, i) => {
      if (out.contexts.has(c.name)) return;
      out.contexts.set(c.name, { file, field: `contexts[${i}].context` });
      contexts.push(c);
    });
  }
  return out;
}

async function restConfigFromKubeconfigFiles(
  paths: string[],
  opts: LoadRestConfigOptions & { requireAll: boolean },
): Promise<RestConfig> {
  const docs: Array<{ file: string; text: string }> = [];
  for (const p of paths) {
    const file = resolve(p);
    try {
      docs.push({ file, text: await readFile(file, "utf8") });
    } catch (e) {
      // kubectl skips KUBECONFIG entries that do not exist; an explicit path must exist.
      if (!opts.requireAll && (e as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw new KubeconfigError(`kubeconfig ${file}`, "", fileProblem(e));
    }
  }
  if (docs.length === 0) {
    throw new KubeconfigError(`KUBECONFIG=${paths.join(":")}`, "", "none of these files exists");
  }
  return await restConfigFromMerged(mergeKubeconfigs(docs), opts);
}

/** Resolves the current context of a merged kubeconfig into a {@link RestConfig}. */
export async function restConfigFromMerged(
  m: MergedKubeconfig,
  opts: Pick<LoadRestConfigOptions, "tokenRefreshMs" | "now"> = {},
): Promise<RestConfig> {
  const byName = <T extends { name: string }>(list: T[], name: string) =>
    list.find((e) => e.name === name) ?? null;
  const current = m.currentContext;
  if (!current) throw new KubeconfigError(`kubeconfig ${m.files.join(":")}`, "current-context", "not set");
  const ctx = byName(m.contextList, current);
  if (!ctx) {
    throw new KubeconfigError(
      `kubeconfig ${m.currentContextFile}`,
      "current-context",
      `no context named "${current}"`,
    );
  }
  const ctxAt = m.contexts.get(current)!;
  const cluster = byName(m.clusterList, ctx.cluster);
  if (!cluster) {
    throw new KubeconfigError(
      `kubeconfig ${ctxAt.file}`,
      `${ctxAt.field}.cluster`,
      `no cluster named "${ctx.cluster}"`,
    );
  }
  let user: User | null = null;
  if (ctx.user) {
    user = byName(m.userList, ctx.user);
    if (!user) {
      throw new KubeconfigError(
        `kubeconfig ${ctxAt.file}`,
        `${ctxAt.field}.user`,
        `no user named "${ctx.user}"`,
      );
    }
  }

  const at = m.clusters.get(cluster.name)!;
  const where = `kubeconfig ${at.file}`;
  const cf = (f: string) => `${at.field}.${f}`;
  // Our transport cannot honour these; silently ignoring them would connect somewhere else or fail TLS.
  if (cluster.proxyUrl) throw new KubeconfigError(where, cf("proxy-url"), "not supported by edgeproxy");
  if (cluster.tlsServerName) {
    throw new KubeconfigError(where, cf("tls-server-name"), "not supported by edgeproxy");
  }
  const caPem = pem(where, cf("certificate-authority"), cluster.caFile, cluster.caData);
  if (cluster.skipTLSVerify && caPem) {
    // client-go refuses this pair (transport.TLSConfigFor), and so do we.
    throw new KubeconfigError(
      where,
      cf("insecure-skip-tls-verify"),
      "specifying a root certificates file with the insecure flag is not allowed",
    );
  }
  const server = normalizeServer(cluster.server, where, cf("server"));
  const credentials = user
    ? await credentialsFromUser(user, m.users.get(user.name)!, {
      server,
      caPem,
      insecure: cluster.skipTLSVerify,
    }, opts)
    : noCredentials();
  return {
    server,
    caPem,
    insecureSkipTlsVerify: cluster.skipTLSVerify,
    credentials,
    source: `kubeconfig ${m.files.join(":")} (context ${current})`,
  };
}

async function credentialsFromUser(
  user: User,
  at: Origin & { tokenFile?: string },
  cluster: { server: string; caPem?: string; insecure: boolean },
  opts: Pick<LoadRestConfigOptions, "tokenRefreshMs" | "now">,
): Promise<Credentials> {
  const where = `kubeconfig ${at.file}`;
  const f = (name: string) => `${at.field}.${name}`;
  const certPem = pem(where, f("client-certificate"), user.certFile, user.certData);
  const keyPem = pem(where, f("client-key"), user.keyFile, user.keyData);
  if (certPem && !keyPem) {
    throw new KubeconfigError(where, f("client-key"), "missing (client-certificate is set)");
  }
  if (keyPem && !certPem) {
    throw new KubeconfigError(where, f("client-certificate"), "missing (client-key is set)");
  }
  if (user.impersonateUser) throw new KubeconfigError(where, f("as"), "not supported by edgeproxy");
  const base: AuthMaterial = { certPem, keyPem };

  if (user.exec !== undefined && user.exec !== null) {
    // Our exec runner, not client-node's ExecAuth: that one spawns with no timeout, in our process group,
    // with stdin open, and cannot be killed, so a hanging plugin would wedge startup and shutdown.
    return new ExecCredentialProvider(parseExecConfig(user.exec, at.file, f("exec")), {
      cluster: { server: cluster.server, caPem: cluster.caPem, insecureSkipTlsVerify: cluster.insecure },
      fallback: base,
      now: opts.now,
    });
  }
  if (user.authProvider) {
    // Legacy auth-providers: gcp and azure were removed from client-go (v1.26); oidc would need
    // client-node's KubeConfig (openid-client), whose module graph alone costs ~4 MiB of resident memory
    // and ~4 MB of binary even when unused. An exec plugin (e.g. kubelogin) does the same job.
    const name = (user.authProvider as { name?: unknown }).name;
    throw new KubeconfigError(
      where,
      f("auth-provider"),
      `${JSON.stringify(name ?? "")}: legacy auth providers are not supported; use an exec plugin`,
    );
  }
  if (user.token) {
    return staticCredentials({ ...base, authorization: `Bearer ${user.token.trim()}` }, "bearer token");
  }
  if (at.tokenFile) {
    // Our re-reader, not client-node's FileAuth: that one reads synchronously, loses the token when a
    // rotation briefly leaves no file, and keeps the trailing newline.
    const src = new FileTokenCredentials(
      at.tokenFile,
      base,
      opts.tokenRefreshMs,
      opts.now,
      `${where}: ${f("tokenFile")}`,
    );
    await src.get(); // fail now, naming the field, if the file is unreadable
    return src;
  }
  if (user.username || user.password) {
    const basic = Buffer.from(`${user.username ?? ""}:${user.password ?? ""}`).toString("base64");
    return staticCredentials({ ...base, authorization: `Basic ${basic}` }, "basic auth");
  }
  return staticCredentials(base, certPem ? "client certificate" : "none");
}

function parseExecConfig(v: unknown, file: string, field: string): ExecConfig {
  const where = `kubeconfig ${file}`;
  if (!isRecord(v)) throw new KubeconfigError(where, field, "must be a mapping");
  const s = (k: string) => str(v, k, where, `${field}.${k}`);
  const command = s("command");
  if (!command) throw new KubeconfigError(where, `${field}.command`, "missing");
  const apiVersion = s("apiVersion") ?? "";
  if (
    apiVersion !== "client.authentication.k8s.io/v1" && apiVersion !== "client.authentication.k8s.io/v1beta1"
  ) {
    throw new KubeconfigError(
      where,
      `${field}.apiVersion`,
      `"${apiVersion}" is not supported (use client.authentication.k8s.io/v1 or v1beta1)`,
    );
  }
  const args = v.args ?? [];
  if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) {
    throw new KubeconfigError(where, `${field}.args`, "must be a list of strings");
  }
  const env: Record<string, string> = {};
  const envList = v.env ?? [];
  if (!Array.isArray(envList)) throw new KubeconfigError(where, `${field}.env`, "must be a list");
  envList.forEach((e, i) => {
    if (!isRecord(e) || typeof e.name !== "string" || typeof (e.value ?? "") !== "string") {
      throw new KubeconfigError(where, `${field}.env[${i}]`, "must have string name and value");
    }
    env[e.name] = String(e.value ?? "");
  });
  if (s("interactiveMode") === "Always") {
    throw new KubeconfigError(
      where,
      `${field}.interactiveMode`,
      "Always needs a terminal; edgeproxy runs unattended",
    );
  }
  // client-go: a command with a slash is relative to the kubeconfig's directory; a bare name is looked up
  // in PATH (client-node's makePathsAbsolute leaves exec commands alone).
  const cmd = command.includes("/") ? resolveRelative(command, file) : command;
  return {
    command: cmd,
    args: args as string[],
    env,
    apiVersion,
    provideClusterInfo: v.provideClusterInfo === true,
    installHint: s("installHint"),
    origin: `${where}: ${field}`,
  };
}

// ---------------------------------------------------------------------------------------------------------
// in-cluster

/**
 * The in-cluster configuration (rest.InClusterConfig): service host/port from process.env, the
 * service-account token (re-read, see {@link FileTokenCredentials}) and CA.
 */
export async function inClusterConfig(
  opts: Pick<LoadRestConfigOptions, "inClusterRoot" | "tokenRefreshMs" | "now"> = {},
): Promise<RestConfig> {
  const where = "in-cluster configuration";
  const host = process.env.KUBERNETES_SERVICE_HOST ?? "";
  const port = process.env.KUBERNETES_SERVICE_PORT ?? "";
  if (!host || !port) {
    throw new KubeconfigError(
      "no apiserver configured",
      "",
      "give --kubeconfig or --master, set KUBECONFIG, or run in a pod " +
        "(in-cluster configuration needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)",
    );
  }
  const dir = `${opts.inClusterRoot ?? ""}${SERVICE_ACCOUNT_DIR}`;
  const tokenPath = `${dir}/token`;
  // client-go continues without a CA (and fails TLS later); say so now instead.
  const caPem = pem(where, "", `${dir}/ca.crt`, undefined);
  const credentials = new FileTokenCredentials(tokenPath, {}, opts.tokenRefreshMs, opts.now, where);
  await credentials.get();
  return {
    server: `https://${joinHostPort(host, port)}`, // client-go: net.JoinHostPort
    caPem,
    insecureSkipTlsVerify: false,
    credentials,
    source: `in-cluster (${dir})`,
  };
}

// ---------------------------------------------------------------------------------------------------------
// credentials

/** Credentials that never change. */
export function staticCredentials(m: AuthMaterial, description: string): Credentials {
  const frozen = { ...m };
  return { get: () => Promise.resolve(frozen), invalidate: () => {}, description };
}

function noCredentials(): Credentials {
  return staticCredentials({}, "none");
}

/**
 * A bearer token read from a file and re-read every `refreshMs` (and after a 401), so rotated projected
 * service-account tokens are used without a restart. A failed re-read keeps the last good token.
 */
export class FileTokenCredentials implements Credentials {
  readonly description: string;
  readonly #path: string;
  readonly #base: AuthMaterial;
  readonly #refreshMs: number;
  readonly #now: () => number;
  readonly #origin: string;
  #token = "";
  #readAt = Number.NEGATIVE_INFINITY;
  #pending: Promise<AuthMaterial> | null = null;

  /** `origin` names the setting in error messages. */
  constructor(path: string, base: AuthMaterial, refreshMs = 60_000, now = () => Date.now(), origin = path) {
    this.#path = path;
    this.#base = base;
    this.#refreshMs = refreshMs;
    this.#now = now;
    this.#origin = origin;
    this.description = `token file ${path}`;
  }

  /** See {@link Credentials.get}. */
  get(): Promise<AuthMaterial> {
    if (this.#token && this.#now() - this.#readAt < this.#refreshMs) {
      return Promise.resolve({ ...this.#base, authorization: `Bearer ${this.#token}` });
    }
    this.#pending ??= this.#read().finally(() => (this.#pending = null));
    return this.#pending;
  }

  async #read(): Promise<AuthMaterial> {
    try {
      const t = (await readFile(this.#path, "utf8")).trim();
      if (!t) throw new Error("file is empty");
      this.#token = t;
    } catch (e) {
      if (!this.#token) {
        const problem = e instanceof Error && e.message === "file is empty"
          ? "file is empty"
          : fileProblem(e);
        throw new KubeconfigError(this.#origin, "", `${this.#path}: ${problem}`);
      }
      // keep the previous token; the next get() after refreshMs tries again
    }
    this.#readAt = this.#now();
    return { ...this.#base, authorization: `Bearer ${this.#token}` };
  }

  /** See {@link Credentials.invalidate}. */
  invalidate(): void {
    this.#readAt = Number.NEGATIVE_INFINITY;
  }
}

// ---------------------------------------------------------------------------------------------------------
// helpers

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function firstLine(e: unknown): string {
  return String((e as Error)?.message ?? e).split("\n")[0];
}

function str(o: Record<string, unknown>, key: string, where: string, field: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new KubeconfigError(where, field, "must be a string");
  return v;
}

function resolveRelative(p: string, kubeconfigFile: string): string {
  return isAbsolute(p) ? p : resolve(dirname(kubeconfigFile), p);
}

function fileProblem(e: unknown): string {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === "ENOENT") return "file not found";
  if (code === "EACCES" || code === "EPERM") return "permission denied";
  if (code === "EISDIR") return "is a directory";
  return firstLine(e);
}

/**
 * A PEM from `<field>-data` (base64) or the file `<field>` (already absolute): the data wins, as in
 * client-go (client-node's bufferFromFileOrString prefers the file, so it gets one of them only).
 */
function pem(
  where: string,
  field: string,
  file: string | undefined,
  data: string | undefined,
): string | undefined {
  const dataField = field ? `${field}-data` : "";
  let buf: Buffer | null;
  try {
    buf = data ? Buffer.from(data.replace(/\s+/g, ""), "base64") : file ? readFileSync(file) : null;
  } catch (e) {
    throw new KubeconfigError(where, field, `${fileProblem(e)} (${file})`);
  }
  if (!buf) return undefined;
  const text = buf.toString("utf8");
  if (!text.includes("-----BEGIN ")) {
    throw data
      ? new KubeconfigError(where, dataField, "not base64-encoded PEM")
      : new KubeconfigError(where, field, `not PEM (${file})`);
  }
  return text;
}

function normalizeServer(server: string, where: string, field: string): string {
  let url: URL;
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(server) ? server : `https://${server}`;
  try {
    url = new URL(withScheme);
  } catch {
    throw new KubeconfigError(where, field, `"${server}" is not a URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new KubeconfigError(where, field, `"${server}": scheme must be https or http`);
  }
  return url.toString().replace(/\/+$/, "");
}
