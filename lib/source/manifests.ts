/**
 * The `--manifests` source: Services, EndpointSlices, ServiceCIDRs and the own Node read from a file or a directory of
 * kubectl-style YAML/JSON instead of an apiserver. A directory is read non-recursively (`*.yaml`, `*.yml`,
 * `*.json`, sorted by name, dotfiles skipped). Documents may be multi-document YAML and `kubectl get -o yaml`
 * List documents (`kind: List`, `ServiceList`, ...). Files are polled (node:fs watch is unreliable across
 * runtimes) and changes are delivered as add/update/delete diffs keyed by kind/namespace/name, with no event
 * for an object whose content did not change. Objects are delivered without `metadata.resourceVersion`, so
 * an edit that keeps the copied resourceVersion is still a change everywhere downstream.
 *
 * Bad input never takes down what works: a document without kind/apiVersion/name is reported in one line,
 * `manifests <file> document <i>: <problem>`, and the other documents still apply; a file that stops parsing
 * (e.g. while an editor writes it) keeps its previous objects until it parses again.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import type { EndpointSlice, Node, Service, ServiceCIDR } from "../k8s/objects.ts";
import { namespacedName, PROXY_LABEL_SELECTOR } from "../k8s/objects.ts";
import type { ProxyHandlers } from "../proxy/handlers.ts";

/** The kinds this source delivers. */
export type ManifestKind = "Service" | "EndpointSlice" | "Node" | "ServiceCIDR";

/** One object read from a manifest. */
export interface ManifestObject {
  kind: ManifestKind;
  /** `Kind/namespace/name` (`Node/name` for Nodes): the identity diffs are keyed by. */
  key: string;
  object: Service | EndpointSlice | Node | ServiceCIDR;
  /** Where it came from, for messages: `<file> document <i>` (plus ` items[<j>]` inside a List). */
  origin: string;
}

/** What one file holds: valid objects in document order, one line per problem, and YAML syntax failure. */
export interface ParsedManifest {
  objects: ManifestObject[];
  errors: string[];
  /** True when at least one document had a YAML syntax error. */
  syntaxError: boolean;
}

/** Options of startManifestsSource. */
export interface ManifestsSourceOptions {
  /** Only the Node with this name is delivered. */
  nodeName: string;
  /** Receives one line per problem (bad document, unreadable file, handler failure). */
  warn: (message: string) => void;
  /** How often files are checked for changes (default 1000 ms). */
  pollIntervalMs?: number;
}

/** A running manifests source. */
export interface ManifestsSource {
  /** Stops polling; no handler is called afterwards. */
  stop(): void;
}

const API_VERSIONS: Record<ManifestKind, string> = {
  Service: "v1",
  EndpointSlice: "discovery.k8s.io/v1",
  Node: "v1",
  ServiceCIDR: "networking.k8s.io/v1",
};

const TYPED_LISTS: Record<string, ManifestKind> = {
  ServiceList: "Service",
  EndpointSliceList: "EndpointSlice",
  NodeList: "Node",
  ServiceCIDRList: "ServiceCIDR",
};

/** File name endings read from a directory (as `kubectl apply -f <dir>`). */
const MANIFEST_EXTENSIONS = [".yaml", ".yml", ".json"];

/**
 * The label requirements of PROXY_LABEL_SELECTOR (`!key` = must not carry the label, `key` = must carry it),
 * parsed once so this source filters exactly like the apiserver does for the informers.
 */
const PROXY_LABEL_REQUIREMENTS: Array<{ key: string; present: boolean }> = PROXY_LABEL_SELECTOR.split(",")
  .map((r) => r.trim())
  .map((r) => {
    if (!/^!?[A-Za-z0-9./_-]+$/.test(r)) throw new Error(`manifests: unsupported label requirement "${r}"`);
    return r.startsWith("!") ? { key: r.slice(1), present: false } : { key: r, present: true };
  });

/** Whether a Service/EndpointSlice passes the proxy label selector (skips service-proxy-name, headless). */
export function matchesProxyLabels(labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  return PROXY_LABEL_REQUIREMENTS.every(({ key, present }) => Object.hasOwn(l, key) === present);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** Validates one object; returns the object or a problem (without location). */
function checkObject(
  raw: unknown,
  inferred?: ManifestKind,
): { ok: true; obj: ManifestObject["object"]; kind: ManifestKind } | { ok: false; problem: string } | {
  ok: "skip";
} {
  if (!isRecord(raw)) {
    return { ok: false, problem: `not an object (${Array.isArray(raw) ? "array" : typeof raw})` };
  }
  const obj = structuredClone(raw);
  if (inferred) {
    obj.kind ??= inferred;
    obj.apiVersion ??= API_VERSIONS[inferred];
  }
  const kind = obj.kind;
  if (typeof kind !== "string" || kind === "") return { ok: false, problem: "missing kind" };
  if (typeof obj.apiVersion !== "string" || obj.apiVersion === "") {
    return { ok: false, problem: `${kind}: missing apiVersion` };
  }
  if (!(kind in API_VERSIONS)) return { ok: "skip" };
  const k = kind as ManifestKind;
  if (obj.apiVersion !== API_VERSIONS[k]) {
    return {
      ok: false,
      problem: `${kind}: apiVersion "${obj.apiVersion}" is not supported (want ${API_VERSIONS[k]})`,
    };
  }
  const meta = obj.metadata;
  if (meta !== undefined && !isRecord(meta)) {
    return { ok: false, problem: `${kind}: metadata is not an object` };
  }
  const name = meta?.name;
  if (typeof name !== "string" || name === "") {
    return { ok: false, problem: `${kind}: missing metadata.name` };
  }
  // A Node's fields of the wrong shape are dropped one by one downstream (lib/source/node_shape.ts), for every
  // source alike; only Services and EndpointSlices need their labels here, for the proxy label selector.
  for (const field of k === "Node" || k === "ServiceCIDR" ? [] : ["labels", "annotations"] as const) {
    const m = meta![field];
    if (m === undefined || m === null) continue;
    if (!isRecord(m)) return { ok: false, problem: `${kind} ${name}: metadata.${field} is not a map` };
    for (const [lk, lv] of Object.entries(m)) {
      if (typeof lv !== "string") {
        return {
          ok: false,
          problem: `${kind} ${name}: metadata.${field}["${lk}"] is not a string (${JSON.stringify(lv)})`,
        };
      }
    }
  }
  // A resourceVersion in a file is a leftover of `kubectl get -o yaml`, not a version: it stays the same
  // when the file is edited. Downstream, equal resourceVersions mean "unchanged" (apiserver semantics), so
  // file-sourced objects carry none and are compared by content.
  delete meta!.resourceVersion;
  if (k === "Node" || k === "ServiceCIDR") {
    delete meta!.namespace; // cluster-scoped
  } else if (meta!.namespace === undefined || meta!.namespace === null || meta!.namespace === "") {
    meta!.namespace = "default"; // kubectl's default namespace for a manifest without one
  } else if (typeof meta!.namespace !== "string") {
    return { ok: false, problem: `${kind} ${name}: metadata.namespace is not a string` };
  }
  return { ok: true, obj: obj as ManifestObject["object"], kind: k };
}

function keyOf(kind: ManifestKind, obj: ManifestObject["object"]): string {
  const m = obj.metadata!;
  return kind === "Node" || kind === "ServiceCIDR"
    ? `${kind}/${m.name}`
    : `${kind}/${namespacedName(m.namespace!, m.name!)}`;
}

/**
 * Parses the text of one manifest file (YAML or JSON, multi-document, List documents). Pure: `file` is only
 * used in messages. Documents are numbered from 1.
 */
export function parseManifestText(text: string, file: string): ParsedManifest {
  const out: ParsedManifest = { objects: [], errors: [], syntaxError: false };
  const docs = parseAllDocuments(text, { prettyErrors: false, uniqueKeys: true });
  const list = Array.isArray(docs) ? docs : [];
  list.forEach((doc, i) => {
    const where = `manifests ${file} document ${i + 1}`;
    if (doc.errors.length > 0) {
      out.syntaxError = true;
      out.errors.push(`${where}: ${doc.errors[0].message.split("\n")[0]}`);
      return;
    }
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (err) {
      out.errors.push(`${where}: ${String(err instanceof Error ? err.message : err).split("\n")[0]}`);
      return;
    }
    if (value === null || value === undefined) return; // empty document (e.g. a trailing `---`)
    const add = (raw: unknown, origin: string, inferred?: ManifestKind) => {
      const r = checkObject(raw, inferred);
      if (r.ok === "skip") return;
      if (r.ok === false) {
        out.errors.push(`${origin}: ${r.problem}`);
        return;
      }
      out.objects.push({ kind: r.kind, key: keyOf(r.kind, r.obj), object: r.obj, origin });
    };
    if (
      isRecord(value) && typeof value.kind === "string" &&
      (value.kind === "List" || value.kind in TYPED_LISTS)
    ) {
      const items = value.items ?? [];
      if (!Array.isArray(items)) {
        out.errors.push(`${where}: ${value.kind}: items is not a list`);
        return;
      }
      items.forEach((item, j) => add(item, `${where}: items[${j}]`, TYPED_LISTS[value.kind as string]));
      return;
    }
    add(value, where);
  });
  return out;
}

/** JSON with sorted keys: two objects with equal content render the same regardless of key order. */
function canonical(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (isRecord(v)) {
    return `{${
      Object.keys(v).sort().filter((k) => v[k] !== undefined).map((k) =>
        `${JSON.stringify(k)}:${canonical(v[k])}`
      )
        .join(",")
    }}`;
  }
  return JSON.stringify(v);
}

interface FileState {
  mtimeMs: number;
  size: number;
  hash: string;
  objects: ManifestObject[];
}

/** Files to read for `path`: the file itself, or the manifest files of a directory (sorted, non-recursive). */
function listFiles(path: string): string[] {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path)
    .filter((f) => !f.startsWith(".") && MANIFEST_EXTENSIONS.some((e) => f.endsWith(e)))
    .sort()
    .map((f) => join(path, f))
    .filter((f) => {
      try {
        return statSync(f).isFile();
      } catch {
        return false;
      }
    });
}

/**
 * A file whose mtime is this recent may still be rewritten within the same mtime tick with the same size,
 * so it is re-read (and hashed) on every poll until it is older than this ("racy" window, as in git).
 */
const RACY_MS = 3000;

/**
 * Starts the manifests source. The first load happens before this returns: the own Node, Services and
 * EndpointSlices are added (in that order, each sorted by key), then onServicesSynced, onEndpointSlicesSynced
 * and onNodeSynced are called once. Throws if `path` does not exist at start (a typo should stop the
 * process, not program an empty node); if it disappears later, the last state is kept until it returns.
 */
export function startManifestsSource(
  path: string,
  handlers: ProxyHandlers,
  opts: ManifestsSourceOptions,
): ManifestsSource {
  statSync(path); // throws ENOENT with the path in the message
  const pollMs = opts.pollIntervalMs ?? 1000;
  const files = new Map<string, FileState>();
  let delivered = new Map<string, ManifestObject>();
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let rootMissingWarned = false;

  const call = (what: string, fn: () => void) => {
    try {
      fn();
    } catch (err) {
      opts.warn(`manifests: handler ${what} failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  };

  /**
   * Content seen once but not yet applied, by file. A change (or a removal) is applied only when two reads in
   * a row agree, so a file caught half-written by a non-atomic writer (truncate, then write) never flaps its
   * objects through delete and re-add. The second read comes after `settleMs`, not a full poll interval.
   */
  const pendingHash = new Map<string, string>();
  const pendingRemoval = new Set<string>();
  const settleMs = Math.min(pollMs, 100);

  /** Re-reads what changed; `changed`: the objects may differ, `unsettled`: something awaits a second read. */
  const scan = (initial: boolean): { changed: boolean; unsettled: boolean } => {
    let names: string[];
    try {
      names = listFiles(path);
      rootMissingWarned = false;
    } catch (err) {
      if (!rootMissingWarned) {
        opts.warn(`manifests ${path}: ${errMessage(err)}; keeping the last loaded objects`);
        rootMissingWarned = true;
      }
      return { changed: false, unsettled: false };
    }
    let changed = false;
    let unsettled = false;
    for (const f of [...files.keys()]) {
      if (names.includes(f)) {
        pendingRemoval.delete(f);
      } else if (initial || pendingRemoval.has(f)) {
        files.delete(f);
        pendingRemoval.delete(f);
        changed = true;
      } else {
        pendingRemoval.add(f);
        unsettled = true;
      }
    }
    for (const f of pendingHash.keys()) if (!names.includes(f)) pendingHash.delete(f);
    const now = Date.now();
    for (const f of names) {
      const prev = files.get(f);
      let st;
      try {
        st = statSync(f);
      } catch {
        continue; // vanished between listing and stat: the next poll sees it gone
      }
      if (
        prev && !pendingHash.has(f) && prev.mtimeMs === st.mtimeMs && prev.size === st.size &&
        now - st.mtimeMs > RACY_MS
      ) {
        continue;
      }
      let text: string;
      try {
        text = readFileSync(f, "utf8");
      } catch (err) {
        if (!prev || prev.hash !== "unreadable") opts.warn(`manifests ${f}: ${errMessage(err)}`);
        if (prev) prev.hash = "unreadable";
        continue;
      }
      const hash = createHash("sha256").update(text).digest("hex");
      if (prev && prev.hash === hash) {
        prev.mtimeMs = st.mtimeMs;
        prev.size = st.size;
        pendingHash.delete(f);
        continue;
      }
      if (!initial && pendingHash.get(f) !== hash) {
        pendingHash.set(f, hash);
        unsettled = true;
        continue;
      }
      pendingHash.delete(f);
      const parsed = parseManifestText(text, f);
      for (const e of parsed.errors) opts.warn(e);
      if (parsed.syntaxError && prev) {
        opts.warn(`manifests ${f}: not applied (YAML syntax error); keeping its previous objects`);
        Object.assign(prev, { mtimeMs: st.mtimeMs, size: st.size, hash });
        continue;
      }
      files.set(f, { mtimeMs: st.mtimeMs, size: st.size, hash, objects: parsed.objects });
      changed = true;
    }
    return { changed, unsettled };
  };

  /** The objects to deliver: first definition of a key wins, filtered by node name and proxy labels. */
  const desired = (): Map<string, ManifestObject> => {
    const out = new Map<string, ManifestObject>();
    // File name order (as read from the directory), whatever order the files were first seen in.
    for (const f of [...files.keys()].sort()) {
      const st = files.get(f)!;
      for (const o of st.objects) {
        const first = out.get(o.key);
        if (first) {
          opts.warn(
            `${o.origin}: duplicate ${o.key.replace("/", " ")}, ignored (first defined at ${first.origin})`,
          );
          continue;
        }
        out.set(o.key, o);
      }
    }
    for (const [k, o] of out) {
      const keep = o.kind === "Node"
        ? o.object.metadata!.name === opts.nodeName
        : o.kind === "ServiceCIDR" || matchesProxyLabels(o.object.metadata!.labels);
      if (!keep) out.delete(k);
    }
    return out;
  };

  const KIND_ORDER: ManifestKind[] = ["Node", "ServiceCIDR", "Service", "EndpointSlice"];

  const apply = () => {
    const next = desired();
    const keys = [...new Set([...delivered.keys(), ...next.keys()])].sort((a, b) => {
      const ka = KIND_ORDER.indexOf(a.split("/")[0] as ManifestKind);
      const kb = KIND_ORDER.indexOf(b.split("/")[0] as ManifestKind);
      return ka - kb || (a < b ? -1 : a > b ? 1 : 0);
    });
    const prevDelivered = delivered;
    delivered = next;
    for (const k of keys) {
      if (stopped) return;
      const before = prevDelivered.get(k);
      const after = next.get(k);
      if (before && after && canonical(before.object) === canonical(after.object)) continue;
      const kind = (after ?? before)!.kind;
      if (kind === "Service") {
        const [b, a] = [before?.object as Service | undefined, after?.object as Service | undefined];
        if (b && a) call("onServiceUpdate", () => handlers.onServiceUpdate(b, a));
        else if (a) call("onServiceAdd", () => handlers.onServiceAdd(a));
        else call("onServiceDelete", () => handlers.onServiceDelete(b!));
      } else if (kind === "EndpointSlice") {
        const [b, a] = [
          before?.object as EndpointSlice | undefined,
          after?.object as EndpointSlice | undefined,
        ];
        if (b && a) call("onEndpointSliceUpdate", () => handlers.onEndpointSliceUpdate(b, a));
        else if (a) call("onEndpointSliceAdd", () => handlers.onEndpointSliceAdd(a));
        else call("onEndpointSliceDelete", () => handlers.onEndpointSliceDelete(b!));
      } else if (kind === "ServiceCIDR") {
        const [b, a] = [before?.object as ServiceCIDR | undefined, after?.object as ServiceCIDR | undefined];
        if (b && a) call("onServiceCIDRUpdate", () => handlers.onServiceCIDRUpdate?.(b, a));
        else if (a) call("onServiceCIDRAdd", () => handlers.onServiceCIDRAdd?.(a));
        else call("onServiceCIDRDelete", () => handlers.onServiceCIDRDelete?.(b!));
      } else {
        const [b, a] = [before?.object as Node | undefined, after?.object as Node | undefined];
        if (b && a) call("onNodeUpdate", () => handlers.onNodeUpdate(b, a));
        else if (a) call("onNodeAdd", () => handlers.onNodeAdd(a));
        else call("onNodeDelete", () => handlers.onNodeDelete(b!));
      }
    }
  };

  scan(true);
  apply();
  if (![...delivered.values()].some((o) => o.kind === "Node")) {
    opts.warn(
      `manifests ${path}: no Node named "${opts.nodeName}"; topology labels and the node's podCIDR are unknown`,
    );
  }
  call("onServicesSynced", () => handlers.onServicesSynced());
  call("onEndpointSlicesSynced", () => handlers.onEndpointSlicesSynced());
  call("onNodeSynced", () => handlers.onNodeSynced());
  call("onServiceCIDRsSynced", () => handlers.onServiceCIDRsSynced?.());

  const tick = () => {
    if (stopped) return;
    let next = pollMs;
    try {
      const r = scan(false);
      if (r.changed) apply();
      if (r.unsettled) next = settleMs;
    } catch (err) {
      opts.warn(`manifests ${path}: ${errMessage(err)}`);
    }
    if (!stopped) timer = setTimeout(tick, next);
  };
  timer = setTimeout(tick, pollMs);

  return {
    stop() {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
    },
  };
}

function errMessage(err: unknown): string {
  const e = err as { code?: string; message?: string };
  if (e?.code === "ENOENT") return "no such file or directory";
  if (e?.code === "EACCES") return "permission denied";
  return e?.message ?? String(err);
}
