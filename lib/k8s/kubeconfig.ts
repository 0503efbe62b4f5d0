/**
 * Where the apiserver is and how to authenticate: kubeconfig files (kubectl's merge rules), in-cluster
 * service-account configuration, and the --master override. Our own small loader on the `yaml` package;
 * @kubernetes/client-node's KubeConfig is not used at runtime (its TLS and watch handling break on Deno and
 * Bun, see /work/shared/research/runtime.md §3).
 *
 * Precedence, as upstream kube-proxy (cmd/kube-proxy/app/server.go createClient) plus KUBECONFIG:
 * 1. an explicit kubeconfig path (--kubeconfig / clientConnection.kubeconfig), alone;
 * 2. else the files in $KUBECONFIG (colon-separated, merged);
 * 3. else, with --master, that URL with no credentials;
 * 4. else in-cluster (KUBERNETES_SERVICE_HOST/PORT and the service-account token and CA).
 * --master overrides the server URL in every case.
 */
import { readFile } from "node:fs/promises";
import { dirname, isAbsolute, resolve } from "node:path";
import { Buffer } from "node:buffer";
import { parse as parseYaml } from "yaml";
import { type ExecConfig, ExecCredentialProvider } from "./exec_credential.ts";

/** What one request needs to authenticate: a header value and/or a client certificate. */
export interface AuthMaterial {
  /** Full Authorization header value ("Bearer …" or "Basic …"). */
  authorization?: string;
  /** Client certificate chain (PEM). */
  certPem?: string;
  /** Client key (PEM). */
  keyPem?: string;
}

/** A source of credentials that may change over time (rotated token files, exec plugins). */
export interface Credentials {
  /** The material for the next request (cached; cheap to call per request). */
  get(): Promise<AuthMaterial>;
  /** The apiserver answered 401: forget cached material so the next get() re-reads or re-runs. */
  invalidate(): void;
  /** What kind of credentials these are, for logs (never the secret itself). */
  readonly description: string;
}

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
  /** Environment to read KUBECONFIG and KUBERNETES_SERVICE_* from (default: process.env). */
  env?: Record<string, string | undefined>;
  /** Service-account directory (default /var/run/secrets/kubernetes.io/serviceaccount). */
  serviceAccountDir?: string;
  /** How often token files are re-read (ms, default 60 000), so rotated bound tokens are picked up. */
  tokenRefreshMs?: number;
  /** Clock in ms (tests). */
  now?: () => number;
}

/** Default service-account mount. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** Loads the apiserver connection following the precedence in this module's header. */
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
    cfg.server = normalizeServer(master, "--master");
    if (cfg.source !== "--master") cfg.source += " with --master";
  }
  return cfg;
}

// ---------------------------------------------------------------------------------------------------------
// kubeconfig files

interface Named<T> {
  name: string;
  value: T;
  /** Which file and list index defined it, for error messages. */
  file: string;
  field: string;
}

/** The merged content of one or more kubeconfig files (only the parts edgeproxy uses). */
export interface MergedKubeconfig {
  files: string[];
  currentContext: string;
  /** The file that set current-context. */
  currentContextFile: string;
  clusters: Map<string, Named<Record<string, unknown>>>;
  users: Map<string, Named<Record<string, unknown>>>;
  contexts: Map<string, Named<Record<string, unknown>>>;
}

/** A kubeconfig problem: names the file and the field. */
export class KubeconfigError extends Error {
  constructor(file: string, field: string, problem: string) {
    super(field ? `kubeconfig ${file}: ${field}: ${problem}` : `kubeconfig ${file}: ${problem}`);
    this.name = "KubeconfigError";
  }
}

/**
 * Parses and merges kubeconfig texts with kubectl's rules: for clusters, users and contexts the first file
 * defining a name wins; current-context comes from the first file that sets it.
 */
export function mergeKubeconfigs(docs: Array<{ file: string; text: string }>): MergedKubeconfig {
  const out: MergedKubeconfig = {
    files: docs.map((d) => d.file),
    currentContext: "",
    currentContextFile: "",
    clusters: new Map(),
    users: new Map(),
    contexts: new Map(),
  };
  for (const { file, text } of docs) {
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (e) {
      throw new KubeconfigError(file, "", `not valid YAML: ${(e as Error).message.split("\n")[0]}`);
    }
    if (doc === null || doc === undefined) continue; // an empty file is allowed, as in kubectl
    if (!isRecord(doc)) throw new KubeconfigError(file, "", "not a YAML mapping");
    const cc = doc["current-context"];
    if (cc !== undefined && cc !== null && typeof cc !== "string") {
      throw new KubeconfigError(file, "current-context", "must be a string");
    }
    if (!out.currentContext && cc) {
      out.currentContext = cc;
      out.currentContextFile = file;
    }
    mergeList(file, doc, "clusters", "cluster", out.clusters);
    mergeList(file, doc, "users", "user", out.users);
    mergeList(file, doc, "contexts", "context", out.contexts);
  }
  return out;
}

function mergeList(
  file: string,
  doc: Record<string, unknown>,
  list: string,
  inner: string,
  into: Map<string, Named<Record<string, unknown>>>,
): void {
  const v = doc[list];
  if (v === undefined || v === null) return;
  if (!Array.isArray(v)) throw new KubeconfigError(file, list, "must be a list");
  v.forEach((entry, i) => {
    const field = `${list}[${i}]`;
    if (!isRecord(entry)) throw new KubeconfigError(file, field, "must be a mapping");
    if (typeof entry.name !== "string" || entry.name === "") {
      throw new KubeconfigError(file, `${field}.name`, "missing");
    }
    const value = entry[inner] ?? {};
    if (!isRecord(value)) throw new KubeconfigError(file, `${field}.${inner}`, "must be a mapping");
    if (!into.has(entry.name)) {
      into.set(entry.name, { name: entry.name, value, file, field: `${field}.${inner}` });
    }
  });
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
      throw new KubeconfigError(file, "", fileProblem(e));
    }
  }
  if (docs.length === 0) {
    throw new Error(`KUBECONFIG=${paths.join(":")}: none of these files exists`);
  }
  return await restConfigFromMerged(mergeKubeconfigs(docs), opts);
}

/** Resolves the current context of a merged kubeconfig into a {@link RestConfig}. */
export async function restConfigFromMerged(
  kc: MergedKubeconfig,
  opts: Pick<LoadRestConfigOptions, "tokenRefreshMs" | "now"> = {},
): Promise<RestConfig> {
  const where = kc.files.join(":");
  if (!kc.currentContext) throw new KubeconfigError(where, "current-context", "not set");
  const ctx = kc.contexts.get(kc.currentContext);
  if (!ctx) {
    throw new KubeconfigError(
      kc.currentContextFile,
      "current-context",
      `no context named "${kc.currentContext}"`,
    );
  }
  const clusterName = ctx.value.cluster;
  const userName = ctx.value.user;
  if (typeof clusterName !== "string" || clusterName === "") {
    throw new KubeconfigError(ctx.file, `${ctx.field}.cluster`, "missing");
  }
  const cluster = kc.clusters.get(clusterName);
  if (!cluster) {
    throw new KubeconfigError(ctx.file, `${ctx.field}.cluster`, `no cluster named "${clusterName}"`);
  }
  let user: Named<Record<string, unknown>> | undefined;
  if (userName !== undefined && userName !== null && userName !== "") {
    if (typeof userName !== "string") {
      throw new KubeconfigError(ctx.file, `${ctx.field}.user`, "must be a string");
    }
    user = kc.users.get(userName);
    if (!user) throw new KubeconfigError(ctx.file, `${ctx.field}.user`, `no user named "${userName}"`);
  }

  const c = cluster.value;
  const cf = (f: string) => `${cluster.field}.${f}`;
  const server = str(c, "server", cluster.file, cf("server"));
  if (!server) throw new KubeconfigError(cluster.file, cf("server"), "missing");
  for (const unsupported of ["proxy-url", "tls-server-name"]) {
    if (c[unsupported]) {
      throw new KubeconfigError(cluster.file, cf(unsupported), "not supported by edgeproxy");
    }
  }
  const caPem = await pemFromFileOrData(c, "certificate-authority", cluster.file, cluster.field);
  const insecure = c["insecure-skip-tls-verify"];
  if (insecure !== undefined && typeof insecure !== "boolean") {
    throw new KubeconfigError(cluster.file, cf("insecure-skip-tls-verify"), "must be true or false");
  }
  const credentials = user
    ? await credentialsFromUser(user, { server, caPem, insecure: insecure === true }, opts)
    : noCredentials();
  return {
    server: normalizeServer(server, `kubeconfig ${cluster.file}: ${cf("server")}`),
    caPem,
    insecureSkipTlsVerify: insecure === true,
    credentials,
    source: `kubeconfig ${where} (context ${kc.currentContext})`,
  };
}

async function credentialsFromUser(
  user: Named<Record<string, unknown>>,
  cluster: { server: string; caPem?: string; insecure: boolean },
  opts: Pick<LoadRestConfigOptions, "tokenRefreshMs" | "now">,
): Promise<Credentials> {
  const u = user.value;
  const file = user.file;
  const f = (name: string) => `${user.field}.${name}`;
  if (u["auth-provider"]) {
    throw new KubeconfigError(file, f("auth-provider"), "legacy auth providers are not supported; use exec");
  }
  const certPem = await pemFromFileOrData(u, "client-certificate", file, user.field);
  const keyPem = await pemFromFileOrData(u, "client-key", file, user.field);
  if (certPem && !keyPem) {
    throw new KubeconfigError(file, f("client-key"), "missing (client-certificate is set)");
  }
  if (keyPem && !certPem) {
    throw new KubeconfigError(file, f("client-certificate"), "missing (client-key is set)");
  }
  const token = str(u, "token", file, f("token"));
  const tokenFile = str(u, "tokenFile", file, f("tokenFile"));
  const username = str(u, "username", file, f("username"));
  const password = str(u, "password", file, f("password"));
  const base = { certPem, keyPem };

  if (u.exec !== undefined && u.exec !== null) {
    const exec = parseExecConfig(u.exec, file, f("exec"));
    return new ExecCredentialProvider(exec, {
      cluster: { server: cluster.server, caPem: cluster.caPem, insecureSkipTlsVerify: cluster.insecure },
      fallback: base,
      now: opts.now,
    });
  }
  if (token) return staticCredentials({ ...base, authorization: `Bearer ${token}` }, "bearer token");
  if (tokenFile) {
    const path = resolveRelative(tokenFile, file);
    const src = new FileTokenCredentials(
      path,
      base,
      opts.tokenRefreshMs,
      opts.now,
      `kubeconfig ${file}: ${f("tokenFile")}`,
    );
    await src.get(); // fail now, naming the field, if the file is unreadable
    return src;
  }
  if (username || password) {
    const basic = Buffer.from(`${username ?? ""}:${password ?? ""}`).toString("base64");
    return staticCredentials({ ...base, authorization: `Basic ${basic}` }, "basic auth");
  }
  return staticCredentials(base, certPem ? "client certificate" : "none");
}

function parseExecConfig(v: unknown, file: string, field: string): ExecConfig {
  if (!isRecord(v)) throw new KubeconfigError(file, field, "must be a mapping");
  const command = str(v, "command", file, `${field}.command`);
  if (!command) throw new KubeconfigError(file, `${field}.command`, "missing");
  const apiVersion = str(v, "apiVersion", file, `${field}.apiVersion`) ?? "";
  if (
    apiVersion !== "client.authentication.k8s.io/v1" && apiVersion !== "client.authentication.k8s.io/v1beta1"
  ) {
    throw new KubeconfigError(
      file,
      `${field}.apiVersion`,
      `"${apiVersion}" is not supported (use client.authentication.k8s.io/v1 or v1beta1)`,
    );
  }
  const args = v.args ?? [];
  if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) {
    throw new KubeconfigError(file, `${field}.args`, "must be a list of strings");
  }
  const env: Record<string, string> = {};
  const envList = v.env ?? [];
  if (!Array.isArray(envList)) throw new KubeconfigError(file, `${field}.env`, "must be a list");
  envList.forEach((e, i) => {
    if (!isRecord(e) || typeof e.name !== "string" || typeof (e.value ?? "") !== "string") {
      throw new KubeconfigError(file, `${field}.env[${i}]`, "must have string name and value");
    }
    env[e.name] = String(e.value ?? "");
  });
  const interactiveMode = str(v, "interactiveMode", file, `${field}.interactiveMode`);
  if (interactiveMode === "Always") {
    throw new KubeconfigError(
      file,
      `${field}.interactiveMode`,
      "Always needs a terminal; edgeproxy runs unattended",
    );
  }
  // A command with a slash is relative to the kubeconfig's directory; a bare name is looked up in PATH.
  const cmd = command.includes("/") ? resolveRelative(command, file) : command;
  return {
    command: cmd,
    args: args as string[],
    env,
    apiVersion,
    provideClusterInfo: v.provideClusterInfo === true,
    installHint: str(v, "installHint", file, `${field}.installHint`),
    origin: `kubeconfig ${file}: ${field}`,
  };
}

// ---------------------------------------------------------------------------------------------------------
// in-cluster

/** The in-cluster configuration (rest.InClusterConfig): service host/port env and the SA token and CA. */
export async function inClusterConfig(opts: LoadRestConfigOptions = {}): Promise<RestConfig> {
  const env = opts.env ?? (process.env as Record<string, string | undefined>);
  const host = env.KUBERNETES_SERVICE_HOST ?? "";
  const port = env.KUBERNETES_SERVICE_PORT ?? "";
  if (!host || !port) {
    throw new Error(
      "no apiserver configured: give --kubeconfig or --master, set KUBECONFIG, or run in a pod " +
        "(in-cluster configuration needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)",
    );
  }
  const dir = opts.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const tokenPath = resolve(dir, "token");
  const caPath = resolve(dir, "ca.crt");
  let caPem: string | undefined;
  try {
    caPem = await readFile(caPath, "utf8");
  } catch (e) {
    // client-go continues without a CA (and fails TLS later); say so now instead.
    throw new Error(`in-cluster configuration: ${caPath}: ${fileProblem(e)}`);
  }
  const credentials = new FileTokenCredentials(
    tokenPath,
    {},
    opts.tokenRefreshMs,
    opts.now,
    "in-cluster token",
  );
  try {
    await credentials.get();
  } catch (e) {
    throw new Error(`in-cluster configuration: ${(e as Error).message}`);
  }
  const h = host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
  return {
    server: `https://${h}:${port}`,
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
        throw new Error(`${this.#origin} (${this.#path}): ${problem}`);
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

function str(o: Record<string, unknown>, key: string, file: string, field: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new KubeconfigError(file, field, "must be a string");
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
  return (e as Error)?.message ?? String(e);
}

/** Reads `<key>` (a path, relative to the kubeconfig) or `<key>-data` (base64 PEM); -data wins. */
async function pemFromFileOrData(
  o: Record<string, unknown>,
  key: string,
  file: string,
  prefix: string,
): Promise<string | undefined> {
  const dataField = `${prefix}.${key}-data`;
  const data = str(o, `${key}-data`, file, dataField);
  if (data) {
    const pem = Buffer.from(data.replace(/\s+/g, ""), "base64").toString("utf8");
    if (!pem.includes("-----BEGIN ")) throw new KubeconfigError(file, dataField, "not base64-encoded PEM");
    return pem;
  }
  const path = str(o, key, file, `${prefix}.${key}`);
  if (!path) return undefined;
  const full = resolveRelative(path, file);
  let pem: string;
  try {
    pem = await readFile(full, "utf8");
  } catch (e) {
    throw new KubeconfigError(file, `${prefix}.${key}`, `${fileProblem(e)} (${full})`);
  }
  if (!pem.includes("-----BEGIN ")) throw new KubeconfigError(file, `${prefix}.${key}`, `not PEM (${full})`);
  return pem;
}

function normalizeServer(server: string, what: string): string {
  let url: URL;
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(server) ? server : `https://${server}`;
  try {
    url = new URL(withScheme);
  } catch {
    throw new Error(`${what}: "${server}" is not a URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new Error(`${what}: "${server}": scheme must be https or http`);
  }
  return url.toString().replace(/\/+$/, "");
}
