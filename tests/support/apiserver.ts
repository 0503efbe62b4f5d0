/**
 * A faithful test apiserver for the resources kube-proxy reads (Services, EndpointSlices, Nodes, ServiceCIDRs):
 * HTTPS with a generated CA, bearer-token or client-certificate auth, LIST with `limit`/`continue`
 * and `resourceVersion`/`resourceVersionMatch`, WATCH with resume from a resourceVersion, bookmarks,
 * `timeoutSeconds`, label and field selectors (including the DELETED/ADDED an object gets when it stops or
 * starts matching), 410 Expired after compaction, gzip above 128 KiB when asked, a count of the body bytes
 * each response put on the wire, and fault injection for client hardening tests (including middleboxes
 * that cut connections or buffer whole responses).
 * Runs in-process on node:https under both Deno and Bun (tests/support/apiserver_main.ts runs it as a process).
 *
 *   const srv = await startTestApiserver({ bookmarkIntervalMs: 100 });
 *   srv.create("services", { metadata: { name: "web", namespace: "shop" }, spec: { clusterIP: "10.96.0.20" } });
 *   await srv.writeKubeconfig(path, { user: "clientCert" });
 *   srv.faults.dropWatches();  ...  await srv.close();
 *
 * Known difference: under Bun, node:tls cannot read the client certificate's CN, so any client certificate
 * signed by the test CA is accepted there (Deno checks CN=system:kube-proxy).
 */
import https from "node:https";
import http2 from "node:http2";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { TLSSocket } from "node:tls";
import { rm, writeFile } from "node:fs/promises";
import { gzipSync } from "node:zlib";
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { stringify as toYaml } from "yaml";
import { CLIENT_CERT_CN, generateTestCerts, type TestCerts } from "./certs.ts";
import {
  type FieldRequirement,
  type LabelSelector,
  matchFields,
  matchLabels,
  parseFieldSelector,
  parseLabelSelector,
  SelectorError,
} from "./apiserver_selectors.ts";
import {
  clone,
  type KubeObject,
  objectKey,
  ObjectStore,
  type ResourceKind,
  RESOURCES,
  StoreError,
  type StoreEvent,
} from "./apiserver_store.ts";
import { CONTINUE_EXPIRED_MESSAGE, statusBody, tooOldMessage } from "./apiserver_status.ts";

export type { KubeObject, ResourceKind } from "./apiserver_store.ts";

/** Options of startTestApiserver. */
export interface TestApiserverOptions {
  /** Bearer token the server accepts (random when omitted). */
  token?: string;
  /** Changes kept for watch resume; resuming from an older resourceVersion gives 410 (default 1000). */
  historyLimit?: number;
  /** Interval of BOOKMARK events on watches with allowWatchBookmarks=true (default 1000 ms). */
  bookmarkIntervalMs?: number;
  /** Port to listen on (default: an ephemeral port, kept across down()/up()). */
  port?: number;
  /** Directory for the CA/server/client certificates and the token file; reused when it already holds them. */
  tlsDir?: string;
  /**
   * How a new watch from a compacted resourceVersion is refused: "status" (default) = HTTP 410 with a Status
   * body; "event" = HTTP 200 and one ERROR event with the 410 Status, then the stream ends (what the watch
   * cache of a real apiserver does).
   */
  expiredWatchAs?: "status" | "event";
  /**
   * Offer HTTP/2 by ALPN (as a real apiserver does), HTTP/1.1 still accepted (`allowHTTP1`). Default off:
   * HTTP/1.1 only. Fault injection works in both; under HTTP/2 a dropped watch is a reset stream.
   */
  http2?: boolean;
  /**
   * Send bookmarks as a real apiserver's watch cache does (cacheWatcher.nextBookmarkTime): every
   * `bookmarkIntervalMs` and once 2 s before the end of a watch with timeoutSeconds, and only when the
   * resourceVersion has moved past what the watcher was last sent. Default off: a bookmark every
   * `bookmarkIntervalMs`, moved or not (tests that wait for one).
   */
  watchCacheBookmarks?: boolean;
  /**
   * How ServiceCIDRs (networking.k8s.io/v1) are served: "served" (default), "notFound" (an apiserver without
   * the API: 404, and the group is not discovered) or "forbidden" (RBAC without list/watch servicecidrs: 403).
   */
  serviceCIDRs?: "served" | "notFound" | "forbidden";
  /**
   * The apiserver's watch cache (default true): a LIST with resourceVersion=0 is answered from it in one
   * response, `limit` ignored. false = `--watch-cache=false`: such a LIST goes to storage and is paginated.
   */
  watchCache?: boolean;
}

/** One served request, in arrival order. `status` is the HTTP status sent (0 while not answered yet). */
export interface RecordedRequest {
  method: string;
  path: string;
  query: string;
  status: number;
  watch: boolean;
  /** Body bytes sent so far (after compression), counted as they are written. */
  bytes: number;
  /** The body was sent gzip-compressed. */
  gzip: boolean;
  /** HTTP version of the request: "1.1" or "2.0". */
  httpVersion: string;
  /** When it arrived (performance.now() of the serving process). */
  at: number;
  /** When its whole (non-watch) body was handed to the socket (performance.now(); 0 before). */
  sentAt: number;
}

/** Options of writeKubeconfig. */
export interface KubeconfigOptions {
  /** token (inline, default), tokenFile (path to the token file), clientCert (client-certificate + key files). */
  user?: "token" | "tokenFile" | "clientCert";
  /** Embed CA and client cert/key as `*-data` (base64) instead of file paths. */
  embed?: boolean;
  /** Server URL to write (default `url`; e.g. `https://localhost:PORT` to exercise hostname checks). */
  server?: string;
}

/** Fault injection controls; each fault applies to requests or streams from the moment it is set. */
export interface TestApiserverFaults {
  /**
   * Closes every open watch stream abruptly (socket destroyed, no final chunk, no event). Stalled streams are
   * not affected (see stallWatches).
   */
  dropWatches(): void;
  /**
   * The next n requests (any path) get `status` (default 500) with a Status body; 429 and 503 also get
   * `Retry-After: <retryAfterSeconds>` (default 1) and the same details.retryAfterSeconds.
   */
  failNext(n: number, status?: number, retryAfterSeconds?: number): void;
  /**
   * The next watch request of each of `kinds` (default all) is refused with 410 Expired, as `style` says:
   * "status" = HTTP 410 with a Status body, "event" = HTTP 200 and one ERROR event (code 410), then the end.
   */
  goneNextWatch(style?: "status" | "event", kinds?: ResourceKind[]): void;
  /**
   * Watch streams of `kinds` (default all) opened from now on (until clear()) send, after their headers,
   * one endless line: the start of an ADDED event, then 64 KiB chunks of "x" without a newline, as fast as
   * the client reads them, until the client goes away.
   */
  endlessWatchLine(kinds?: ResourceKind[]): void;
  /** The next `n` LIST responses (default 1) are padded (a valid JSON field) to more than `bytes` bytes. */
  oversizeNextList(bytes: number, n?: number): void;
  /** Stops listening and drops every connection (clients get connection refused). */
  down(): Promise<void>;
  /** Listens again on the same port. */
  up(): Promise<void>;
  /** Simulates an apiserver restart after an etcd restore: down, revision bumped and compacted, up. */
  restartWithNewHistory(): Promise<void>;
  /**
   * Drops all history now: a watch request or `continue` token with an older resourceVersion gets 410, and
   * every open (not stalled) watch stream gets an ERROR event (410 Expired) and ends.
   */
  compact(): void;
  /** Delays the start of every response by `ms` (0 turns it off). */
  slow(ms: number): void;
  /** The next watch event line written (on any stream) is replaced by a line that is not JSON. */
  garbageNextWatchLine(): void;
  /** The next LIST response body is cut in half (full Content-Length announced, then the socket is closed). */
  truncateNextList(): void;
  /**
   * Watch streams open now stop sending anything (events, bookmarks, their timeoutSeconds end) but stay open,
   * like a connection lost in the network: later dropWatches()/compact() do not reach them either. They end
   * only when the client closes them, or on down()/close(). Streams opened later are not stalled.
   */
  stallWatches(): void;
  /** The next n requests get 401 (default) or 403. */
  unauthorizedNext(n: number, code?: 401 | 403): void;
  /**
   * A middlebox with a connection lifetime: every connection (open now or opened later) is cut (socket
   * destroyed, no final chunk) `ms` after it opened, or after now for those already open. 0 turns it off.
   */
  cutConnectionsAfter(ms: number): void;
  /**
   * A middlebox that buffers whole responses (`on` true) or stops doing so: responses started from now on
   * send nothing, headers included, until the server ends them; then everything at once, with a
   * Content-Length. A watch thus arrives whole when its timeoutSeconds ends it.
   */
  bufferResponses(on: boolean): void;
  /** Clears every pending fault and ends endless watch lines (does not bring the server up or unstall streams). */
  clear(): void;
}

/** A running test apiserver. */
export interface TestApiserver {
  /** `https://127.0.0.1:PORT`. */
  readonly url: string;
  readonly port: number;
  /** PEM of the CA that signed the server and client certificates. */
  readonly caPem: string;
  readonly caFile: string;
  readonly token: string;
  /** File holding the token (used by kubeconfigs with `tokenFile`). */
  readonly tokenFile: string;
  /** Generated certificate files (client cert CN=system:kube-proxy for client-certificate auth). */
  readonly certs: TestCerts;
  /** Writes a kubeconfig for this server. */
  writeKubeconfig(path: string, opts?: KubeconfigOptions): Promise<void>;
  /** Creates an object (assigns resourceVersion, uid, creationTimestamp); throws if it exists. */
  create<T extends object>(kind: ResourceKind, obj: T): T & KubeObject;
  /** Replaces an existing object; throws if it does not exist. An identical write is a no-op. */
  update<T extends object>(kind: ResourceKind, obj: T): T & KubeObject;
  /** Deletes an object; throws if it does not exist. `namespace` is ignored for nodes. */
  remove(kind: ResourceKind, namespace: string, name: string): void;
  /** Current objects of a kind, sorted by namespace/name, without kind/apiVersion (as LIST items). */
  list(kind: ResourceKind): KubeObject[];
  /** Current resourceVersion (etcd revision). */
  resourceVersion(): string;
  /** Events POSTed by clients (core/v1 and events.k8s.io/v1), with apiVersion and kind set. */
  events(): KubeObject[];
  /** Every request served so far. */
  readonly requests: RecordedRequest[];
  /** Number of open watch streams. */
  activeWatches(): number;
  readonly faults: TestApiserverFaults;
  /** Stops the server and every stream. */
  close(): Promise<void>;
}

const PROXY_PREFIX_CORE = "/api/v1";
/** Response size above which the apiserver compresses (k8s.io/apiserver's defaultGzipThresholdBytes). */
const GZIP_THRESHOLD = 128 * 1024;
const PROXY_PREFIX_DISCOVERY = "/apis/discovery.k8s.io/v1";
const PROXY_PREFIX_EVENTS = "/apis/events.k8s.io/v1";
const PROXY_PREFIX_NETWORKING = "/apis/networking.k8s.io/v1";

type Route =
  | { t: "collection"; kind: ResourceKind; namespace?: string }
  | { t: "item"; kind: ResourceKind; namespace?: string; name: string }
  | { t: "events"; namespace: string; apiVersion: "v1" | "events.k8s.io/v1" }
  | { t: "static"; body: unknown; text?: boolean };

/** A thrown request error: answered with a Status of this code. */
class HttpError extends Error {
  constructor(readonly code: number, message: string, readonly details?: Record<string, unknown>) {
    super(message);
  }
}

/** strconv.ParseBool, as the apiserver's query decoding uses. */
function parseBool(name: string, v: string | null): boolean {
  if (v === null) return false;
  if (["1", "t", "T", "TRUE", "true", "True"].includes(v)) return true;
  if (["", "0", "f", "F", "FALSE", "false", "False"].includes(v)) return false;
  throw new HttpError(
    400,
    `${name}: Invalid value: "${v}": strconv.ParseBool: parsing "${v}": invalid syntax`,
  );
}

function parseInt64(name: string, v: string | null): number | undefined {
  if (v === null || v === "") return undefined;
  if (!/^-?[0-9]+$/.test(v)) {
    throw new HttpError(
      400,
      `${name}: Invalid value: "${v}": strconv.ParseInt: parsing "${v}": invalid syntax`,
    );
  }
  return Number(v);
}

function parseRv(v: string): number {
  if (!/^[0-9]+$/.test(v)) {
    throw new HttpError(400, `resourceVersion: Invalid value: "${v}": resource version must be a number`);
  }
  return Number(v);
}

const b64 = (s: string) => btoa(String.fromCharCode(...new TextEncoder().encode(s)));
const unb64 = (s: string) => new TextDecoder().decode(Uint8Array.from(atob(s), (c) => c.charCodeAt(0)));

/** Encodes a continue token the way the apiserver does (base64 of {"v","rv","start"}). */
function encodeContinue(rv: number, start: string): string {
  return b64(JSON.stringify({ v: "meta.k8s.io/v1", rv, start }))
    .replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function decodeContinue(token: string): { rv: number; start: string } {
  try {
    const padded = token.replace(/-/g, "+").replace(/_/g, "/");
    const o = JSON.parse(unb64(padded + "===".slice((padded.length + 3) % 4)));
    if (o.v !== "meta.k8s.io/v1" || typeof o.rv !== "number" || typeof o.start !== "string") {
      throw new Error();
    }
    return { rv: o.rv, start: o.start };
  } catch {
    throw new HttpError(
      400,
      `continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)`,
    );
  }
}

function route(path: string, port: number): Route | undefined {
  if (path === "/healthz" || path === "/livez" || path === "/readyz") {
    return { t: "static", body: "ok", text: true };
  }
  if (path === "/version") {
    return {
      t: "static",
      body: {
        major: "1",
        minor: "33",
        gitVersion: "v1.33.0-edgeproxy-test",
        gitCommit: "0000000000000000000000000000000000000000",
        gitTreeState: "clean",
        buildDate: "2025-01-01T00:00:00Z",
        goVersion: "go1.24.0",
        compiler: "gc",
        platform: "linux/amd64",
      },
    };
  }
  if (path === "/api") {
    return {
      t: "static",
      body: {
        kind: "APIVersions",
        versions: ["v1"],
        serverAddressByClientCIDRs: [{ clientCIDR: "0.0.0.0/0", serverAddress: `127.0.0.1:${port}` }],
      },
    };
  }
  if (path === "/apis") {
    const group = (name: string) => ({
      name,
      versions: [{ groupVersion: `${name}/v1`, version: "v1" }],
      preferredVersion: { groupVersion: `${name}/v1`, version: "v1" },
    });
    return {
      t: "static",
      body: {
        kind: "APIGroupList",
        apiVersion: "v1",
        groups: [group("discovery.k8s.io"), group("events.k8s.io"), group("networking.k8s.io")],
      },
    };
  }
  const seg = path.split("/").filter((s) => s !== "");
  const resourceList = (groupVersion: string, resources: Array<[string, string, boolean]>) => ({
    t: "static" as const,
    body: {
      kind: "APIResourceList",
      apiVersion: "v1",
      groupVersion,
      resources: resources.map(([name, kind, namespaced]) => ({
        name,
        singularName: kind.toLowerCase(),
        namespaced,
        kind,
        verbs: name === "events" ? ["create", "list"] : ["get", "list", "watch"],
      })),
    },
  });
  if (path === PROXY_PREFIX_CORE) {
    return resourceList("v1", [["services", "Service", true], ["nodes", "Node", false], [
      "events",
      "Event",
      true,
    ]]);
  }
  if (path === PROXY_PREFIX_DISCOVERY) {
    return resourceList("discovery.k8s.io/v1", [["endpointslices", "EndpointSlice", true]]);
  }
  if (path === PROXY_PREFIX_EVENTS) return resourceList("events.k8s.io/v1", [["events", "Event", true]]);
  if (path === PROXY_PREFIX_NETWORKING) {
    return resourceList("networking.k8s.io/v1", [["servicecidrs", "ServiceCIDR", false]]);
  }
  let rest: string[];
  let group: "core" | "discovery" | "events" | "networking";
  if (seg[0] === "api" && seg[1] === "v1") {
    rest = seg.slice(2);
    group = "core";
  } else if (seg[0] === "apis" && seg[1] === "discovery.k8s.io" && seg[2] === "v1") {
    rest = seg.slice(3);
    group = "discovery";
  } else if (seg[0] === "apis" && seg[1] === "events.k8s.io" && seg[2] === "v1") {
    rest = seg.slice(3);
    group = "events";
  } else if (seg[0] === "apis" && seg[1] === "networking.k8s.io" && seg[2] === "v1") {
    rest = seg.slice(3);
    group = "networking";
  } else {
    return undefined;
  }
  let namespace: string | undefined;
  if (rest[0] === "namespaces" && rest.length >= 3) {
    namespace = decodeURIComponent(rest[1]);
    rest = rest.slice(2);
  }
  const [res, name, ...extra] = rest;
  if (extra.length > 0 || res === undefined) return undefined;
  const kindOf: Record<string, ResourceKind> = group === "core"
    ? { services: "services", nodes: "nodes" }
    : group === "discovery"
    ? { endpointslices: "endpointslices" }
    : group === "networking"
    ? { servicecidrs: "servicecidrs" }
    : {};
  if (
    res === "events" && (group === "core" || group === "events") && namespace !== undefined &&
    name === undefined
  ) {
    return { t: "events", namespace, apiVersion: group === "core" ? "v1" : "events.k8s.io/v1" };
  }
  const kind = kindOf[res];
  if (!kind) return undefined;
  if (!RESOURCES[kind].namespaced && namespace !== undefined) return undefined;
  if (name === undefined) return { t: "collection", kind, namespace };
  if (RESOURCES[kind].namespaced && namespace === undefined) return undefined;
  return { t: "item", kind, namespace, name: decodeURIComponent(name) };
}

/** Renders an object with kind/apiVersion first, as in watch events and GET responses. */
function withKind(kind: ResourceKind, obj: KubeObject): KubeObject {
  const { kind: _k, apiVersion: _a, ...rest } = obj;
  return { kind: RESOURCES[kind].kind, apiVersion: RESOURCES[kind].apiVersion, ...rest };
}

interface Watcher {
  kind: ResourceKind;
  filter: (o: KubeObject) => boolean;
  req: IncomingMessage;
  res: ServerResponse;
  stalled: boolean;
  timers: Array<ReturnType<typeof setTimeout>>;
  done: boolean;
  /** resourceVersion of the last event or bookmark sent (what the client would resume from). */
  lastRv: number;
}

class TestApiserverImpl implements TestApiserver {
  readonly requests: RecordedRequest[] = [];
  readonly faults: TestApiserverFaults;
  readonly token: string;
  readonly tokenFile: string;
  #store: ObjectStore;
  #server?: https.Server;
  #sockets = new Set<Socket>();
  #watchers = new Set<Watcher>();
  #events: KubeObject[] = [];
  #port: number;
  #bookmarkMs: number;
  #expiredAs: "status" | "event";
  #watchCache: boolean;
  /** The certificate directory is a temp dir made for this server (no tlsDir): close() removes it. */
  #ownsCertDir: boolean;
  /** Streams sending an endless line (ended by clear()). */
  #endless = new Set<ServerResponse>();
  #f = {
    failN: 0,
    failStatus: 500,
    retryAfterS: 1,
    gone: new Map<ResourceKind, "status" | "event">(),
    endless: new Set<ResourceKind>(),
    oversizeList: 0,
    oversizeN: 0,
    unauthN: 0,
    unauthCode: 401 as 401 | 403,
    slowMs: 0,
    garbage: false,
    truncate: false,
    cutAfterMs: 0,
    buffer: false,
  };
  readonly #serviceCIDRs: "served" | "notFound" | "forbidden";
  /** Cut timers of the connection-lifetime middlebox, per socket. */
  #cuts = new Map<Socket, ReturnType<typeof setTimeout>>();

  /** API Priority and Fairness flow schema and priority level UIDs, sent with every response. */
  readonly #pfUids = [randomUUID(), randomUUID()];
  /** Offer HTTP/2 (TestApiserverOptions.http2). */
  readonly #http2: boolean;
  /** TestApiserverOptions.watchCacheBookmarks. */
  readonly #watchCacheBookmarks: boolean;

  constructor(readonly certs: TestCerts, opts: TestApiserverOptions, token: string) {
    this.token = token;
    this.tokenFile = join(certs.dir, "token");
    this.#store = new ObjectStore(opts.historyLimit ?? 1000);
    this.#port = opts.port ?? 0;
    this.#bookmarkMs = opts.bookmarkIntervalMs ?? 1000;
    this.#expiredAs = opts.expiredWatchAs ?? "status";
    this.#serviceCIDRs = opts.serviceCIDRs ?? "served";
    this.#watchCache = opts.watchCache ?? true;
    this.#ownsCertDir = opts.tlsDir === undefined;
    this.#http2 = opts.http2 ?? false;
    this.#watchCacheBookmarks = opts.watchCacheBookmarks ?? false;
    const f = this.#f;
    this.faults = {
      dropWatches: () => {
        for (const w of [...this.#watchers]) if (!w.stalled) this.#finishWatch(w, "destroy");
      },
      failNext: (n, status = 500, retryAfterSeconds = 1) => {
        f.failN = n;
        f.failStatus = status;
        f.retryAfterS = retryAfterSeconds;
      },
      goneNextWatch: (style = "status", kinds = Object.keys(RESOURCES) as ResourceKind[]) => {
        for (const k of kinds) f.gone.set(k, style);
      },
      endlessWatchLine: (kinds = Object.keys(RESOURCES) as ResourceKind[]) => {
        for (const k of kinds) f.endless.add(k);
      },
      oversizeNextList: (bytes, n = 1) => {
        f.oversizeList = bytes;
        f.oversizeN = n;
      },
      down: () => this.#down(),
      up: () => this.#listen(),
      restartWithNewHistory: async () => {
        await this.#down();
        this.#store.restore();
        await this.#listen();
      },
      compact: () => {
        this.#store.compact();
        for (const w of [...this.#watchers]) {
          if (w.stalled) continue; // nothing reaches the client of a stalled stream
          this.#writeEvent(w, {
            type: "ERROR",
            object: statusBody(410, tooOldMessage(w.lastRv, this.#store.compactedRv)),
          });
          this.#finishWatch(w, "end");
        }
      },
      slow: (ms) => {
        f.slowMs = ms;
      },
      garbageNextWatchLine: () => {
        f.garbage = true;
      },
      truncateNextList: () => {
        f.truncate = true;
      },
      stallWatches: () => {
        for (const w of this.#watchers) {
          w.stalled = true;
          w.timers.forEach((t) => clearTimeout(t));
          w.timers = [];
        }
      },
      unauthorizedNext: (n, code = 401) => {
        f.unauthN = n;
        f.unauthCode = code;
      },
      cutConnectionsAfter: (ms) => {
        f.cutAfterMs = ms;
        for (const t of this.#cuts.values()) clearTimeout(t);
        this.#cuts.clear();
        if (ms > 0) { for (const sock of this.#sockets) this.#scheduleCut(sock); }
      },
      bufferResponses: (on) => {
        f.buffer = on;
      },
      clear: () => {
        Object.assign(f, {
          failN: 0,
          unauthN: 0,
          slowMs: 0,
          garbage: false,
          truncate: false,
          oversizeList: 0,
          oversizeN: 0,
        });
        f.gone.clear();
        f.endless.clear();
        for (const res of this.#endless) res.destroy();
        this.#endless.clear();
      },
    };
    this.#store.subscribe((e) => this.#onStoreEvent(e));
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `https://127.0.0.1:${this.#port}`;
  }

  get caPem(): string {
    return this.certs.caPem;
  }

  get caFile(): string {
    return this.certs.caFile;
  }

  async writeKubeconfig(path: string, opts: KubeconfigOptions = {}): Promise<void> {
    const user = opts.user ?? "token";
    const data = (p: string) => btoa(readFileSync(p, "latin1"));
    const cluster: Record<string, string> = { server: opts.server ?? this.url };
    if (opts.embed) cluster["certificate-authority-data"] = data(this.certs.caFile);
    else cluster["certificate-authority"] = this.certs.caFile;
    const u: Record<string, string> = {};
    if (user === "token") u.token = this.token;
    else if (user === "tokenFile") u.tokenFile = this.tokenFile;
    else if (opts.embed) {
      u["client-certificate-data"] = data(this.certs.clientCertFile);
      u["client-key-data"] = data(this.certs.clientKeyFile);
    } else {
      u["client-certificate"] = this.certs.clientCertFile;
      u["client-key"] = this.certs.clientKeyFile;
    }
    const cfg = {
      apiVersion: "v1",
      kind: "Config",
      clusters: [{ name: "edgeproxy-test", cluster }],
      contexts: [{ name: "edgeproxy-test", context: { cluster: "edgeproxy-test", user: "kube-proxy" } }],
      "current-context": "edgeproxy-test",
      preferences: {},
      users: [{ name: "kube-proxy", user: u }],
    };
    await writeFile(path, toYaml(cfg));
  }

  create<T extends object>(kind: ResourceKind, obj: T): T & KubeObject {
    return withKind(kind, this.#store.create(kind, obj as KubeObject)) as T & KubeObject;
  }

  update<T extends object>(kind: ResourceKind, obj: T): T & KubeObject {
    return withKind(kind, this.#store.update(kind, obj as KubeObject)) as T & KubeObject;
  }

  remove(kind: ResourceKind, namespace: string, name: string): void {
    this.#store.remove(kind, namespace, name);
  }

  list(kind: ResourceKind): KubeObject[] {
    return this.#store.list(kind);
  }

  resourceVersion(): string {
    return String(this.#store.rv);
  }

  events(): KubeObject[] {
    return clone(this.#events);
  }

  activeWatches(): number {
    return this.#watchers.size;
  }

  async close(): Promise<void> {
    await this.#down();
    if (this.#ownsCertDir) await rm(this.certs.dir, { recursive: true, force: true });
  }

  /** Starts listening (initially, and for faults.up()). */
  async #listen(): Promise<void> {
    if (this.#server) return;
    const tlsOpts = {
      key: this.certs.serverKeyPem,
      cert: this.certs.serverCertPem,
      ca: this.certs.caPem,
      requestCert: true,
      rejectUnauthorized: false,
    };
    const handler = (req: IncomingMessage, res: ServerResponse) => {
      this.#handle(req, res).catch((err) => {
        try {
          if (!res.headersSent) this.#sendStatus(req, res, undefined, 500, `Internal error occurred: ${err}`);
          else res.destroy();
        } catch { /* the connection is already gone */ }
      });
    };
    // The HTTP/2 compatibility API's request and response stand in for node:http's (same members used here).
    const server =
      (this.#http2
        ? http2.createSecureServer({ ...tlsOpts, allowHTTP1: true }, handler as never)
        : https.createServer(tlsOpts, handler)) as https.Server;
    server.on("secureConnection", (s: Socket) => this.#track(s));
    server.on("connection", (s: Socket) => this.#track(s));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.#port, "127.0.0.1", () => {
        server.off("error", reject);
        resolve();
      });
    });
    this.#port = (server.address() as { port: number }).port;
    this.#server = server;
  }

  #track(s: Socket): void {
    if (this.#sockets.has(s)) return;
    this.#sockets.add(s);
    if (this.#f.cutAfterMs > 0) this.#scheduleCut(s);
    s.once("close", () => {
      this.#sockets.delete(s);
      clearTimeout(this.#cuts.get(s));
      this.#cuts.delete(s);
    });
  }

  #scheduleCut(s: Socket): void {
    clearTimeout(this.#cuts.get(s));
    this.#cuts.set(
      s,
      setTimeout(() => {
        this.#cuts.delete(s);
        s.destroy();
      }, this.#f.cutAfterMs),
    );
  }

  /**
   * Counts the body bytes of `res` into `rec` as they are written and, with bufferResponses on, holds the
   * whole response (headers included) until it ends, as a buffering proxy does.
   */
  #instrument(res: ServerResponse, rec: RecordedRequest): void {
    const size = (c: unknown) =>
      typeof c === "string" ? new TextEncoder().encode(c).length : (c as Uint8Array | undefined)?.length ?? 0;
    const write = res.write.bind(res) as (c: unknown, cb?: () => void) => boolean;
    const end = res.end.bind(res) as (c?: unknown, cb?: () => void) => ServerResponse;
    const writeHead = res.writeHead.bind(res) as (code: number, h?: Record<string, string>) => ServerResponse;
    const r = res as unknown as Record<string, unknown>;
    const callback = (args: unknown[]) =>
      args.find((a) => typeof a === "function") as (() => void) | undefined;
    if (!this.#f.buffer) {
      // HTTP/2's compatibility response implements end(data) with write(data): count that once.
      let ending = false;
      r.write = (c: unknown, ...rest: unknown[]) => {
        if (!ending) rec.bytes += size(c);
        return write(c, callback(rest));
      };
      r.end = (c?: unknown, ...rest: unknown[]) => {
        if (typeof c === "function") return end(c);
        rec.bytes += size(c);
        ending = true;
        try {
          return end(c, callback(rest));
        } finally {
          ending = false;
        }
      };
      return;
    }
    let head: { code: number; headers: Record<string, string> } = { code: 200, headers: {} };
    const held: Uint8Array[] = [];
    const hold = (c: unknown) => {
      if (c === undefined || c === null || typeof c === "function") return;
      held.push(typeof c === "string" ? new TextEncoder().encode(c) : new Uint8Array(c as Uint8Array));
    };
    r.writeHead = (code: number, headers: Record<string, string> = {}) => {
      head = { code, headers };
      return res;
    };
    r.flushHeaders = () => {};
    let releasing = false;
    r.write = (c: unknown, ...rest: unknown[]) => {
      if (releasing) return write(c, callback(rest)); // HTTP/2's end(data) writes through write()
      hold(c);
      const cb = callback(rest);
      if (cb) queueMicrotask(cb);
      return true;
    };
    r.end = (c?: unknown, ...rest: unknown[]) => {
      hold(c);
      const body = concat(held);
      const headers = Object.fromEntries(
        Object.entries(head.headers).filter(([k]) => !/^(transfer-encoding|content-length)$/i.test(k)),
      );
      rec.bytes += body.length;
      writeHead(head.code, { ...headers, "Content-Length": String(body.length) });
      releasing = true;
      try {
        return end(body, callback(typeof c === "function" ? [c] : rest));
      } finally {
        releasing = false;
      }
    };
  }

  async #down(): Promise<void> {
    const server = this.#server;
    if (!server) return;
    this.#server = undefined;
    for (const w of [...this.#watchers]) this.#finishWatch(w, "destroy");
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
    for (const s of this.#sockets) s.destroy();
    this.#sockets.clear();
    // Some runtimes call the close callback only after idle keep-alive sockets time out; do not wait for that.
    await Promise.race([closed, new Promise((r) => setTimeout(r, 200))]);
  }

  #record(req: IncomingMessage, watch: boolean): RecordedRequest {
    const u = new URL(req.url ?? "/", "https://127.0.0.1");
    const r = {
      method: req.method ?? "GET",
      path: u.pathname,
      query: u.search.slice(1),
      status: 0,
      watch,
      bytes: 0,
      gzip: false,
      httpVersion: req.httpVersion,
      at: performance.now(),
      sentAt: 0,
    };
    this.requests.push(r);
    return r;
  }

  #send(
    res: ServerResponse,
    rec: RecordedRequest | undefined,
    code: number,
    body: unknown,
    headers: Record<string, string> = {},
  ): void {
    const text = typeof body === "string" ? body : JSON.stringify(body);
    let bytes: Uint8Array = new TextEncoder().encode(text);
    const extra: Record<string, string> = {};
    // The apiserver gzips responses above 128 KiB when the client accepts it (APIResponseCompression).
    const accept = String(res.req?.headers["accept-encoding"] ?? "");
    if (bytes.length > GZIP_THRESHOLD && /\bgzip\b/.test(accept)) {
      bytes = gzipSync(bytes);
      extra["Content-Encoding"] = "gzip";
      if (rec) rec.gzip = true;
    }
    if (rec) rec.status = code;
    res.writeHead(code, {
      "Content-Type": typeof body === "string" ? "text/plain; charset=utf-8" : "application/json",
      "Cache-Control": "no-cache, private",
      "Content-Length": String(bytes.length),
      ...extra,
      ...headers,
    });
    res.end(bytes);
    if (rec) rec.sentAt = performance.now();
  }

  #sendStatus(
    _req: IncomingMessage,
    res: ServerResponse,
    rec: RecordedRequest | undefined,
    code: number,
    message: string,
    details?: Record<string, unknown>,
    headers: Record<string, string> = {},
  ): void {
    this.#send(res, rec, code, statusBody(code, message, undefined, details), headers);
  }

  #authenticated(req: IncomingMessage): boolean {
    const m = /^bearer\s+(\S+)\s*$/i.exec(req.headers.authorization ?? "");
    if (m && m[1] === this.token) return true;
    const sock = req.socket as TLSSocket;
    if (!sock.authorized) return false;
    // Bun's node:tls has no getPeerCertificate: there a certificate verified by the test CA is accepted.
    if (typeof sock.getPeerCertificate !== "function") return true;
    return sock.getPeerCertificate()?.subject?.CN === CLIENT_CERT_CN;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.#track(req.socket);
    const u = new URL(req.url ?? "/", "https://127.0.0.1");
    const q = u.searchParams;
    const watchRaw = q.get("watch");
    const looksWatch = watchRaw !== null && ["1", "t", "T", "TRUE", "true", "True"].includes(watchRaw);
    const rec = this.#record(req, looksWatch);
    this.#instrument(res, rec);
    // The headers a real apiserver adds to every response (byte counts on the link depend on them).
    res.setHeader("Audit-Id", randomUUID());
    res.setHeader("X-Kubernetes-Pf-Flowschema-Uid", this.#pfUids[0]);
    res.setHeader("X-Kubernetes-Pf-Prioritylevel-Uid", this.#pfUids[1]);
    const f = this.#f;
    if (f.slowMs > 0) await new Promise((r) => setTimeout(r, f.slowMs));
    if (res.destroyed || req.socket.destroyed) return;
    if (f.failN > 0) {
      f.failN--;
      const code = f.failStatus;
      const headers: Record<string, string> = code === 429 || code === 503
        ? { "Retry-After": String(f.retryAfterS) }
        : {};
      const msg = code === 429
        ? "Too many requests, please try again later."
        : code === 503
        ? "the server is currently unable to handle the request"
        : code === 504
        ? "the server was unable to return a response in the time allotted, but may still be processing the request"
        : `Internal error occurred: injected fault`;
      const details = code === 429 || code === 503 || code === 504
        ? { retryAfterSeconds: code === 504 ? 1 : f.retryAfterS }
        : undefined;
      req.resume();
      return this.#sendStatus(req, res, rec, code, msg, details, headers);
    }
    if (f.unauthN > 0) {
      f.unauthN--;
      req.resume();
      return this.#sendUnauthorized(req, res, rec, f.unauthCode, u.pathname);
    }
    let r = route(u.pathname, this.#port);
    const isServiceCIDRs = (r?.t === "collection" || r?.t === "item") && r.kind === "servicecidrs";
    if (this.#serviceCIDRs === "notFound" && (isServiceCIDRs || u.pathname === PROXY_PREFIX_NETWORKING)) {
      r = undefined;
    } else if (this.#serviceCIDRs === "notFound" && u.pathname === "/apis" && r?.t === "static") {
      const body = r.body as { groups: Array<{ name: string }> };
      r = {
        t: "static",
        body: { ...body, groups: body.groups.filter((g) => g.name !== "networking.k8s.io") },
      };
    }
    if (this.#serviceCIDRs === "forbidden" && isServiceCIDRs && this.#authenticated(req)) {
      req.resume();
      return this.#sendUnauthorized(req, res, rec, 403, u.pathname);
    }
    if (
      r?.t === "static" &&
      (u.pathname === "/healthz" || u.pathname === "/livez" || u.pathname === "/readyz" ||
        u.pathname === "/version")
    ) {
      // public-info-viewer: no authentication needed
      req.resume();
      if (req.method !== "GET" && req.method !== "HEAD") {
        return this.#sendStatus(
          req,
          res,
          rec,
          405,
          "the server does not allow this method on the requested resource",
        );
      }
      return this.#send(res, rec, 200, r.body);
    }
    if (!this.#authenticated(req)) {
      req.resume();
      return this.#sendUnauthorized(req, res, rec, 401, u.pathname);
    }
    try {
      if (!r) {
        req.resume();
        throw new HttpError(404, "the server could not find the requested resource", {});
      }
      if (r.t === "events") {
        if (req.method === "POST") return await this.#createEvent(req, res, rec, r.namespace, r.apiVersion);
        req.resume();
        if (req.method !== "GET") {
          throw new HttpError(405, "the server does not allow this method on the requested resource");
        }
        const items = this.#events.filter((e) =>
          e.apiVersion === r.apiVersion && (e.metadata?.namespace === r.namespace)
        );
        return this.#send(res, rec, 200, {
          kind: "EventList",
          apiVersion: r.apiVersion,
          metadata: { resourceVersion: String(this.#store.rv) },
          items: items.map(({ kind: _k, apiVersion: _a, ...o }) => o),
        });
      }
      req.resume();
      if (req.method !== "GET") {
        throw new HttpError(405, "the server does not allow this method on the requested resource");
      }
      // This server speaks JSON only; a client that accepts only protobuf gets 406, as from an apiserver
      // asked for a type it cannot serve.
      const acceptHdr = req.headers.accept;
      if (acceptHdr && !/(application\/json|application\/\*|\*\/\*)/.test(acceptHdr)) {
        throw new HttpError(406, `only the following media types are accepted: application/json`);
      }
      if (r.t === "static") return this.#send(res, rec, 200, r.body);
      if (r.t === "item" && !looksWatch) {
        const o = this.#store.get(r.kind, r.namespace, r.name);
        if (!o) {
          throw new HttpError(404, `${r.kind} "${r.name}" not found`, {
            name: r.name,
            ...(RESOURCES[r.kind].kind === "EndpointSlice" ? { group: "discovery.k8s.io" } : {}),
            kind: r.kind,
          });
        }
        return this.#send(res, rec, 200, withKind(r.kind, o));
      }
      // A watch on a named object is a watch with fieldSelector metadata.name=<name>.
      if (r.t === "item") {
        const fs = q.get("fieldSelector");
        q.set("fieldSelector", `metadata.name=${r.name}${fs ? "," + fs : ""}`);
      }
      return this.#listOrWatch(req, res, rec, r.kind, r.namespace, q);
    } catch (err) {
      if (err instanceof HttpError) {
        return this.#sendStatus(req, res, rec, err.code, err.message, err.details);
      }
      throw err;
    }
  }

  #sendUnauthorized(
    req: IncomingMessage,
    res: ServerResponse,
    rec: RecordedRequest,
    code: 401 | 403,
    path: string,
  ): void {
    if (code === 401) return this.#sendStatus(req, res, rec, 401, "Unauthorized");
    const r = route(path, this.#port);
    const resource = r && (r.t === "collection" || r.t === "item")
      ? r.kind
      : r?.t === "events"
      ? "events"
      : "";
    const verb = rec.watch ? "watch" : r?.t === "item" ? "get" : "list";
    const msg = resource
      ? `${resource} is forbidden: User "system:kube-proxy" cannot ${verb} resource "${resource}" in API group ` +
        `"${
          resource === "endpointslices"
            ? "discovery.k8s.io"
            : resource === "servicecidrs"
            ? "networking.k8s.io"
            : ""
        }" at the cluster scope`
      : `forbidden: User "system:kube-proxy" cannot get path "${path}"`;
    return this.#sendStatus(req, res, rec, 403, msg, resource ? { kind: resource } : undefined);
  }

  async #createEvent(
    req: IncomingMessage,
    res: ServerResponse,
    rec: RecordedRequest,
    namespace: string,
    apiVersion: "v1" | "events.k8s.io/v1",
  ): Promise<void> {
    const chunks: Uint8Array[] = [];
    for await (const c of req) chunks.push(typeof c === "string" ? new TextEncoder().encode(c) : c);
    let body: KubeObject;
    try {
      body = JSON.parse(new TextDecoder().decode(concat(chunks)));
      if (body === null || typeof body !== "object" || Array.isArray(body)) throw new Error("not an object");
    } catch (err) {
      throw new HttpError(400, `the body of the request was in an unknown format: ${err}`);
    }
    body.metadata ??= {};
    if (body.metadata.namespace && body.metadata.namespace !== namespace) {
      throw new HttpError(
        400,
        "the namespace of the provided object does not match the namespace sent on the request",
      );
    }
    if (!body.metadata.name) {
      const gen = body.metadata.generateName;
      if (typeof gen !== "string" || gen === "") {
        throw new HttpError(
          422,
          'Event "" is invalid: metadata.name: Required value: name or generateName is required',
        );
      }
      body.metadata.name = gen + Math.random().toString(36).slice(2, 7);
    }
    const ev: KubeObject = {
      kind: "Event",
      apiVersion,
      ...body,
      metadata: {
        ...body.metadata,
        namespace,
        uid: crypto.randomUUID(),
        resourceVersion: String(this.#store.rv),
        creationTimestamp: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
      },
    };
    ev.kind = "Event";
    ev.apiVersion = apiVersion;
    this.#events.push(ev);
    this.#send(res, rec, 201, ev);
  }

  #listOrWatch(
    req: IncomingMessage,
    res: ServerResponse,
    rec: RecordedRequest,
    kind: ResourceKind,
    namespace: string | undefined,
    q: URLSearchParams,
  ): void {
    const watch = parseBool("watch", q.get("watch"));
    const allowBookmarks = parseBool("allowWatchBookmarks", q.get("allowWatchBookmarks"));
    const sendInitialEventsRaw = q.get("sendInitialEvents");
    const sendInitialEvents = sendInitialEventsRaw !== null &&
      parseBool("sendInitialEvents", sendInitialEventsRaw);
    const rvParam = q.get("resourceVersion") ?? "";
    const rvMatch = q.get("resourceVersionMatch") ?? "";
    const limit = parseInt64("limit", q.get("limit")) ?? 0;
    const timeoutSeconds = parseInt64("timeoutSeconds", q.get("timeoutSeconds"));
    const cont = q.get("continue") ?? "";
    let labelSel: LabelSelector;
    let fieldSel: FieldRequirement[];
    try {
      labelSel = parseLabelSelector(q.get("labelSelector") ?? "");
      fieldSel = parseFieldSelector(q.get("fieldSelector") ?? "", RESOURCES[kind].fields);
    } catch (err) {
      if (err instanceof SelectorError) throw new HttpError(400, err.message);
      throw err;
    }
    if (rvMatch !== "" && rvMatch !== "NotOlderThan" && rvMatch !== "Exact") {
      throw new HttpError(
        400,
        `resourceVersionMatch: Unsupported value: "${rvMatch}": supported values: "Exact", "NotOlderThan"`,
      );
    }
    if (watch) {
      if (rvMatch !== "" && !sendInitialEvents) {
        throw new HttpError(
          400,
          "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        );
      }
      if (sendInitialEvents && rvMatch !== "NotOlderThan") {
        throw new HttpError(
          400,
          "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        );
      }
      if (sendInitialEvents && !allowBookmarks) {
        throw new HttpError(
          400,
          "allowWatchBookmarks: Forbidden: sendInitialEvents requires setting allowWatchBookmarks to true",
        );
      }
    } else {
      if (sendInitialEventsRaw !== null) {
        throw new HttpError(400, "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list");
      }
      if (rvMatch !== "" && rvParam === "") {
        throw new HttpError(
          400,
          "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        );
      }
      if (rvMatch === "Exact" && rvParam === "0") {
        throw new HttpError(
          400,
          `resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"`,
        );
      }
      if (cont !== "" && rvParam !== "" && rvParam !== "0") {
        throw new HttpError(
          400,
          "resourceVersion: Forbidden: specifying resource version is not allowed when using continue",
        );
      }
    }
    const filter = (o: KubeObject): boolean =>
      (namespace === undefined || o.metadata?.namespace === namespace) &&
      matchLabels(labelSel, o.metadata?.labels) &&
      matchFields(fieldSel, o as Record<string, unknown>);
    const tooLarge = (rv: number) =>
      new HttpError(504, `Too large resource version: ${rv}, current: ${this.#store.rv}`, {
        causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }],
        retryAfterSeconds: 1,
      });
    if (watch) {
      const rv = rvParam === "" || rvParam === "0" ? undefined : parseRv(rvParam);
      if (rv !== undefined && rv > this.#store.rv) throw tooLarge(rv);
      return this.#startWatch(req, res, rec, kind, filter, {
        rv,
        sendInitialEvents,
        allowBookmarks,
        timeoutSeconds,
      });
    }
    // LIST: the stored objects themselves (not copies), only serialized below.
    let snapshotRv: number;
    let items: KubeObject[];
    let start = "";
    let pageLimit = limit > 0 ? limit : 0;
    if (cont !== "") {
      const c = decodeContinue(cont);
      const snap = this.#store.listAt(kind, c.rv, false);
      if (!snap) throw new HttpError(410, CONTINUE_EXPIRED_MESSAGE);
      snapshotRv = c.rv;
      items = snap;
      start = c.start;
    } else if (rvParam === "" || rvParam === "0") {
      snapshotRv = this.#store.rv;
      items = this.#store.list(kind, false);
      // resourceVersion=0 is served from the watch cache, which ignores limit.
      if (rvParam === "0" && this.#watchCache) pageLimit = 0;
    } else {
      const rv = parseRv(rvParam);
      if (rv > this.#store.rv) throw tooLarge(rv);
      // Legacy semantics: resourceVersion=N with limit and no resourceVersionMatch is an exact read (from
      // etcd, 410 once compacted); without limit it is "not older than" (the watch cache's current state).
      if (rvMatch === "Exact" || (rvMatch === "" && pageLimit > 0)) {
        const snap = this.#store.listAt(kind, rv, false);
        if (!snap) throw new HttpError(410, tooOldMessage(rv, this.#store.compactedRv));
        snapshotRv = rv;
        items = snap;
      } else {
        snapshotRv = this.#store.rv;
        items = this.#store.list(kind, false);
      }
    }
    const keyOf = (o: KubeObject) => objectKey(kind, o.metadata?.namespace, o.metadata!.name!);
    let matched = items.filter((o) => filter(o) && (start === "" || keyOf(o) >= start));
    const metadata: Record<string, unknown> = { resourceVersion: String(snapshotRv) };
    if (pageLimit > 0 && matched.length > pageLimit) {
      const rest = matched.length - pageLimit;
      matched = matched.slice(0, pageLimit);
      metadata.continue = encodeContinue(snapshotRv, keyOf(matched[matched.length - 1]) + "\u0000");
      // The apiserver reports remainingItemCount only when no selector filters the list.
      if (labelSel.length === 0 && fieldSel.length === 0) metadata.remainingItemCount = rest;
    }
    let body = JSON.stringify({
      kind: RESOURCES[kind].listKind,
      apiVersion: RESOURCES[kind].apiVersion,
      metadata,
      items: matched,
    });
    if (this.#f.oversizeN > 0) {
      // An unknown field, as a newer or broken apiserver might send: valid JSON, just too large.
      body = `{"padding":"${"x".repeat(this.#f.oversizeList)}",${body.slice(1)}`;
      this.#f.oversizeN--;
    }
    if (this.#f.truncate) {
      this.#f.truncate = false;
      const bytes = new TextEncoder().encode(body);
      rec.status = 200;
      res.writeHead(200, { "Content-Type": "application/json", "Content-Length": String(bytes.length) });
      res.write(bytes.slice(0, Math.floor(bytes.length / 2)), () => {
        setTimeout(() => req.socket.destroy(), 20);
      });
      return;
    }
    // Sent as the text it is: parsing and serializing it again costs the harness a second per 10k objects.
    this.#send(res, rec, 200, body, { "Content-Type": "application/json" });
  }

  #startWatch(
    req: IncomingMessage,
    res: ServerResponse,
    rec: RecordedRequest,
    kind: ResourceKind,
    filter: (o: KubeObject) => boolean,
    o: { rv?: number; sendInitialEvents: boolean; allowBookmarks: boolean; timeoutSeconds?: number },
  ): void {
    const gone = this.#f.gone.get(kind);
    if (gone !== undefined) {
      this.#f.gone.delete(kind);
      const msg = tooOldMessage(o.rv ?? 0, this.#store.rv);
      if (gone === "status") throw new HttpError(410, msg);
      rec.status = 200;
      res.writeHead(200, { "Content-Type": "application/json", "Cache-Control": "no-cache, private" });
      res.end(JSON.stringify({ type: "ERROR", object: statusBody(410, msg) }) + "\n");
      return;
    }
    if (this.#f.endless.has(kind)) return this.#streamEndlessLine(rec, kind, res);
    let backlog: StoreEvent[] = [];
    if (o.rv !== undefined && !o.sendInitialEvents) {
      const since = this.#store.eventsSince(o.rv);
      if (!since) {
        const msg = tooOldMessage(o.rv, this.#store.compactedRv);
        if (this.#expiredAs === "status") throw new HttpError(410, msg);
        rec.status = 200;
        res.writeHead(200, { "Content-Type": "application/json", "Cache-Control": "no-cache, private" });
        res.end(JSON.stringify({ type: "ERROR", object: statusBody(410, msg) }) + "\n");
        return;
      }
      backlog = since;
    }
    rec.status = 200;
    res.writeHead(200, {
      "Content-Type": "application/json",
      "Cache-Control": "no-cache, private",
      ...chunked(req),
    });
    res.flushHeaders?.();
    const w: Watcher = {
      kind,
      filter,
      req,
      res,
      stalled: false,
      timers: [],
      done: false,
      lastRv: o.rv ?? this.#store.rv,
    };
    this.#watchers.add(w);
    res.on("close", () => this.#finishWatch(w, "gone"));
    if (o.rv === undefined || o.sendInitialEvents) {
      for (const obj of this.#store.list(kind)) {
        if (filter(obj)) this.#writeEvent(w, { type: "ADDED", object: withKind(kind, obj) });
      }
      if (o.sendInitialEvents) {
        this.#writeEvent(w, {
          type: "BOOKMARK",
          object: this.#bookmarkObject(kind, { "k8s.io/initial-events-end": "true" }),
        });
      }
    } else {
      for (const e of backlog) this.#deliver(w, e);
    }
    const bookmark = () => {
      // The watch cache sends only events newer than what the watcher has seen, bookmarks included.
      if (this.#watchCacheBookmarks && this.#store.rv <= w.lastRv) return;
      this.#writeEvent(w, { type: "BOOKMARK", object: this.#bookmarkObject(kind) });
    };
    if (o.allowBookmarks && this.#bookmarkMs > 0) w.timers.push(setInterval(bookmark, this.#bookmarkMs));
    // ... and one 2 s before the deadline, so the next watch resumes from as recent a version as possible.
    const timeoutS = o.timeoutSeconds ?? 0;
    if (o.allowBookmarks && this.#watchCacheBookmarks && timeoutS > 2) {
      w.timers.push(setTimeout(bookmark, (timeoutS - 2) * 1000));
    }
    if (o.timeoutSeconds !== undefined && o.timeoutSeconds > 0) {
      w.timers.push(setTimeout(() => this.#finishWatch(w, "end"), o.timeoutSeconds * 1000));
    }
  }

  /** Sends one line that never ends, with backpressure, until the client goes away or clear(). */
  #streamEndlessLine(rec: RecordedRequest, kind: ResourceKind, res: ServerResponse): void {
    rec.status = 200;
    res.writeHead(200, {
      "Content-Type": "application/json",
      "Cache-Control": "no-cache, private",
      ...chunked(res.req),
    });
    this.#endless.add(res);
    const chunk = new TextEncoder().encode("x".repeat(64 * 1024));
    let gone = false;
    res.on("close", () => {
      gone = true;
      this.#endless.delete(res);
    });
    res.write(`{"type":"ADDED","object":{"kind":"${RESOURCES[kind].kind}","metadata":{"name":"`);
    const pump = () => {
      while (!gone && !res.destroyed) {
        if (!res.write(chunk)) {
          res.once("drain", pump);
          return;
        }
      }
    };
    pump();
  }

  #bookmarkObject(kind: ResourceKind, annotations?: Record<string, string>): KubeObject {
    const metadata: Record<string, unknown> = { resourceVersion: String(this.#store.rv) };
    if (annotations) metadata.annotations = annotations;
    return { kind: RESOURCES[kind].kind, apiVersion: RESOURCES[kind].apiVersion, metadata };
  }

  #onStoreEvent(e: StoreEvent): void {
    for (const w of [...this.#watchers]) if (w.kind === e.kind) this.#deliver(w, e);
  }

  /** Converts a change into what this watcher sees, as the watch cache does for selector transitions. */
  #deliver(w: Watcher, e: StoreEvent): void {
    if (w.kind !== e.kind) return;
    const cur = e.type !== "DELETED" && w.filter(e.object);
    const old = e.prev !== undefined && w.filter(e.prev);
    if (cur) {
      this.#writeEvent(w, { type: old ? "MODIFIED" : "ADDED", object: withKind(e.kind, e.object) });
    } else if (old) {
      // previous content, with the resourceVersion of the change
      const gone = clone(e.prev!);
      gone.metadata!.resourceVersion = String(e.rv);
      this.#writeEvent(w, { type: "DELETED", object: withKind(e.kind, gone) });
    }
  }

  #writeEvent(w: Watcher, ev: { type: string; object: unknown }): void {
    if (w.done || w.stalled) return;
    const rv = Number((ev.object as KubeObject)?.metadata?.resourceVersion);
    if (ev.type !== "ERROR" && rv > w.lastRv) w.lastRv = rv;
    let line = JSON.stringify(ev) + "\n";
    if (this.#f.garbage) {
      this.#f.garbage = false;
      line = `{"type":"${ev.type}","object":<<not json>>\n`;
    }
    w.res.write(line);
  }

  #finishWatch(w: Watcher, how: "end" | "destroy" | "gone"): void {
    if (w.done) return;
    w.done = true;
    this.#watchers.delete(w);
    for (const t of w.timers) {
      clearTimeout(t);
      clearInterval(t);
    }
    w.timers = [];
    if (how === "end") w.res.end();
    else if (how === "destroy") {
      const h2stream = (w.req as unknown as { stream?: http2.ServerHttp2Stream }).stream;
      // Under HTTP/2 the connection carries other streams: reset this one, as a lost response would end.
      // (destroy with an error sends RST_STREAM INTERNAL_ERROR in Bun and Deno; close(code) does not in Bun)
      if (h2stream) h2stream.destroy(new Error("watch dropped"));
      else {
        w.res.destroy();
        w.req.socket.destroy();
      }
    }
  }
}

/** HTTP/1.1 streams name their chunked framing; HTTP/2 forbids the header (frames delimit the body). */
function chunked(req: IncomingMessage): Record<string, string> {
  return req.httpVersionMajor >= 2 ? {} : { "Transfer-Encoding": "chunked" };
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/**
 * Starts a test apiserver on 127.0.0.1 (certificates in `opts.tlsDir`, or a fresh temp dir) and writes the
 * token file next to the certificates. Resolves once it is listening.
 */
export async function startTestApiserver(opts: TestApiserverOptions = {}): Promise<TestApiserver> {
  const certs = await generateTestCerts(opts.tlsDir);
  const tokenFile = join(certs.dir, "token");
  let token = opts.token;
  if (token === undefined && opts.tlsDir && existsSync(tokenFile)) {
    token = readFileSync(tokenFile, "utf8").trim();
  }
  token ??= `edgeproxy-test-${crypto.randomUUID()}`;
  await writeFile(tokenFile, token + "\n");
  const server = new TestApiserverImpl(certs, opts, token);
  await server.faults.up();
  return server;
}

export { StoreError };
