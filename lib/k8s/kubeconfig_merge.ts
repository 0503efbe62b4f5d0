/**
 * Parsing and merging kubeconfig files. Entries are parsed and checked by @kubernetes/client-node's entry
 * parsers (newClusters, newUsers, newContexts) into its Cluster/User/Context model; its API clients and
 * Watch are not used (on Deno they hang, on Bun they drop the TLS options). Where client-node differs from
 * client-go, client-go wins (each place says why).
 */
import { parse as parseYaml } from "yaml";
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
import { KubeconfigError } from "./kubeconfig_error.ts";
import { firstLine, isRecord, resolveRelative } from "./kubeconfig_fields.ts";

/** Bound on YAML alias expansion in a kubeconfig (the `yaml` package's default, made explicit). */
const MAX_ALIAS_COUNT = 100;

/** Where a merged entry came from, for messages: its file and its field ("clusters[0].cluster"). */
export interface Origin {
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
