/**
 * Where the apiserver is and how to authenticate: kubeconfig files, in-cluster service-account
 * configuration and the --master override, resolved into a {@link RestConfig} for our own transport
 * (lib/k8s/transport.ts): the kubeconfig's current context picks its cluster and user. The files are
 * merged by lib/k8s/kubeconfig_merge.ts, the user becomes credentials in lib/k8s/kubeconfig_user.ts, the
 * in-cluster configuration is lib/k8s/in_cluster.ts; only the resolved server, CA, client certificate,
 * token and TLS flags leave these modules.
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
import { resolve } from "node:path";
import process from "node:process";
import type { User } from "@kubernetes/client-node/dist/config_types.js";
import { type Credentials, staticCredentials } from "./credentials.ts";
import { inClusterConfig, type InClusterOptions } from "./in_cluster.ts";
import { KubeconfigError } from "./kubeconfig_error.ts";
import { fileProblem, normalizeServer, pem } from "./kubeconfig_fields.ts";
import { type MergedKubeconfig, mergeKubeconfigs } from "./kubeconfig_merge.ts";
import { credentialsFromUser } from "./kubeconfig_user.ts";
import type { RestConfig } from "./rest_config.ts";
import type { TokenRefreshOptions } from "./token_file_credentials.ts";

/** Inputs of {@link loadRestConfig}; everything but the first two is for tests. */
export interface LoadRestConfigOptions extends InClusterOptions {
  /** --kubeconfig or clientConnection.kubeconfig ("" = not given). */
  kubeconfig?: string;
  /** --master ("" = not given). */
  master?: string;
  /**
   * Environment to read KUBECONFIG from (default: process.env). The in-cluster variables are always read
   * from process.env.
   */
  env?: Record<string, string | undefined>;
}

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
  opts: TokenRefreshOptions = {},
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

function noCredentials(): Credentials {
  return staticCredentials({}, "none");
}
