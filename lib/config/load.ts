/**
 * `--config FILE`: reads a KubeProxyConfiguration v1alpha1 document (YAML or JSON), decodes it strictly,
 * applies upstream's defaulting and validates it. Any problem is ONE line:
 * `invalid config <file>: <field.path>: <problem> (got <value>)`, and nothing of the file is used.
 *
 * Strictness: unknown fields (case-sensitive, as upstream's strict decoder), duplicate keys, wrong types,
 * bad durations and a wrong apiVersion/kind are errors. (Upstream falls back to a lenient decode with a
 * warning for unknown fields; edgeproxy refuses them, so a typo never silently becomes a default.)
 * YAML is read with the YAML 1.2 core schema: `yes`/`on` are strings, not booleans.
 */
import { readFile } from "node:fs/promises";
import { parse, YAMLParseError } from "yaml";
import { DurationError, parseDurationNs } from "./duration.ts";
import { applyDefaults, CONFIG_API_VERSION, CONFIG_KIND, type UnsetPointers } from "./defaults.ts";
import { type FieldError, fieldError, formatFieldError } from "./field_error.ts";
import type { KubeProxyConfiguration, VModuleItem } from "./types.ts";
import { validateConfig } from "./validate.ts";

/** Bound on YAML alias expansion (the `yaml` package's default, made explicit): stops "billion laughs". */
const MAX_ALIAS_COUNT = 100;

/** A configuration file that cannot be used; `message` is the one line to print. */
export class ConfigError extends Error {
  /** The file named by --config. */
  readonly file: string;
  /** All problems found (the message shows the first). */
  readonly errors: FieldError[];
  constructor(file: string, errors: FieldError[]) {
    super(`invalid config ${file}: ${formatFieldError(errors[0])}`);
    this.name = "ConfigError";
    this.file = file;
    this.errors = errors;
  }
}

type Scalar = "string" | "bool" | "int32" | "uint32" | "float" | "duration" | "flushFrequency" | "quantity";
type Kind = Scalar | "stringList" | "boolMap" | "vmodule" | Schema;
interface Schema {
  [field: string]: Kind;
}

/** The v1alpha1 document shape, with Go's JSON field names. */
const SCHEMA: Schema = {
  apiVersion: "string",
  kind: "string",
  featureGates: "boolMap",
  clientConnection: {
    kubeconfig: "string",
    acceptContentTypes: "string",
    contentType: "string",
    qps: "float",
    burst: "int32",
  },
  logging: {
    format: "string",
    flushFrequency: "flushFrequency",
    verbosity: "uint32",
    vmodule: "vmodule",
    options: {
      json: { infoBufferSize: "quantity", splitStream: "bool" },
      text: { infoBufferSize: "quantity", splitStream: "bool" },
    },
  },
  hostnameOverride: "string",
  bindAddress: "string",
  healthzBindAddress: "string",
  metricsBindAddress: "string",
  bindAddressHardFail: "bool",
  enableProfiling: "bool",
  showHiddenMetricsForVersion: "string",
  mode: "string",
  iptables: {
    masqueradeBit: "int32",
    masqueradeAll: "bool",
    localhostNodePorts: "bool",
    syncPeriod: "duration",
    minSyncPeriod: "duration",
  },
  ipvs: {
    syncPeriod: "duration",
    minSyncPeriod: "duration",
    scheduler: "string",
    excludeCIDRs: "stringList",
    strictARP: "bool",
    tcpTimeout: "duration",
    tcpFinTimeout: "duration",
    udpTimeout: "duration",
  },
  nftables: {
    masqueradeBit: "int32",
    masqueradeAll: "bool",
    syncPeriod: "duration",
    minSyncPeriod: "duration",
  },
  winkernel: {
    networkName: "string",
    sourceVip: "string",
    enableDSR: "bool",
    rootHnsEndpointName: "string",
    forwardHealthCheckVip: "bool",
  },
  detectLocalMode: "string",
  detectLocal: { bridgeInterface: "string", interfaceNamePrefix: "string" },
  clusterCIDR: "string",
  nodePortAddresses: "stringList",
  oomScoreAdj: "int32",
  conntrack: {
    maxPerCore: "int32",
    min: "int32",
    tcpEstablishedTimeout: "duration",
    tcpCloseWaitTimeout: "duration",
    tcpBeLiberal: "bool",
    udpTimeout: "duration",
    udpStreamTimeout: "duration",
  },
  configSyncPeriod: "duration",
  portRange: "string",
  windowsRunAsService: "bool",
};

/** Fields that are pointers in the Go type: defaulted only when absent or null (0 / false stay). */
const POINTER_FIELDS: Record<string, keyof UnsetPointers> = {
  "iptables.masqueradeBit": "iptablesMasqueradeBit",
  "iptables.localhostNodePorts": "iptablesLocalhostNodePorts",
  "nftables.masqueradeBit": "nftablesMasqueradeBit",
  "oomScoreAdj": "oomScoreAdj",
  "conntrack.maxPerCore": "conntrackMaxPerCore",
  "conntrack.min": "conntrackMin",
  "conntrack.tcpEstablishedTimeout": "conntrackTCPEstablishedTimeout",
  "conntrack.tcpCloseWaitTimeout": "conntrackTCPCloseWaitTimeout",
};

/** Go's zero value for every field: what a decode starts from before the file's values are set. */
function zeroConfig(): KubeProxyConfiguration {
  return {
    apiVersion: CONFIG_API_VERSION,
    kind: CONFIG_KIND,
    featureGates: {},
    clientConnection: { kubeconfig: "", acceptContentTypes: "", contentType: "", qps: 0, burst: 0 },
    logging: {
      flushFrequency: 0,
      format: "",
      verbosity: 0,
      options: { json: { infoBufferSize: "" }, text: { infoBufferSize: "" } },
    },
    hostnameOverride: "",
    bindAddress: "",
    healthzBindAddress: "",
    metricsBindAddress: "",
    bindAddressHardFail: false,
    enableProfiling: false,
    showHiddenMetricsForVersion: "",
    mode: "",
    iptables: {
      masqueradeBit: 0,
      masqueradeAll: false,
      localhostNodePorts: false,
      syncPeriod: 0,
      minSyncPeriod: 0,
    },
    ipvs: {
      syncPeriod: 0,
      minSyncPeriod: 0,
      scheduler: "",
      excludeCIDRs: null,
      strictARP: false,
      tcpTimeout: 0,
      tcpFinTimeout: 0,
      udpTimeout: 0,
    },
    nftables: { masqueradeBit: 0, masqueradeAll: false, syncPeriod: 0, minSyncPeriod: 0 },
    winkernel: {
      networkName: "",
      sourceVip: "",
      enableDSR: false,
      rootHnsEndpointName: "",
      forwardHealthCheckVip: false,
    },
    detectLocalMode: "",
    detectLocal: { bridgeInterface: "", interfaceNamePrefix: "" },
    clusterCIDR: "",
    nodePortAddresses: null,
    oomScoreAdj: 0,
    conntrack: {
      maxPerCore: 0,
      min: 0,
      tcpEstablishedTimeout: 0,
      tcpCloseWaitTimeout: 0,
      tcpBeLiberal: false,
      udpTimeout: 0,
      udpStreamTimeout: 0,
    },
    configSyncPeriod: 0,
    portRange: "",
    windowsRunAsService: false,
  };
}

const QUANTITY_RE = /^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$/;
const DURATION_HINT = "not a valid duration (use e.g. 500ms, 30s, 1m0s, 24h0m0s)";

function isMapping(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

type Decoded = { ok: true; value: unknown } | { ok: false; error: FieldError };

const ok = (value: unknown): Decoded => ({ ok: true, value });
const bad = (path: string, problem: string, v: unknown): Decoded => ({
  ok: false,
  error: fieldError(path, problem, v),
});

/** Decodes one non-null scalar value. */
function decodeScalar(kind: Scalar, v: unknown, path: string): Decoded {
  switch (kind) {
    case "string":
      if (typeof v === "string") return ok(v);
      return bad(path, typeof v === "number" ? "must be a string (quote the value)" : "must be a string", v);
    case "bool":
      if (typeof v === "boolean") return ok(v);
      return bad(path, "must be true or false", v);
    case "int32":
      if (typeof v === "number" && Number.isInteger(v) && v >= -2147483648 && v <= 2147483647) return ok(v);
      return bad(path, "must be a 32-bit integer", v);
    case "uint32":
      if (typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= 4294967295) return ok(v);
      return bad(path, "must be a non-negative integer", v);
    case "float":
      if (typeof v === "number" && Number.isFinite(v)) return ok(v);
      return bad(path, "must be a number", v);
    case "duration":
    case "flushFrequency": {
      // logging.flushFrequency (TimeOrMetaDuration) also takes a number of nanoseconds.
      if (kind === "flushFrequency" && typeof v === "number" && Number.isInteger(v)) return ok(v / 1e6);
      if (typeof v !== "string") return bad(path, 'must be a duration string such as "30s"', v);
      try {
        return ok(Number(parseDurationNs(v)) / 1e6);
      } catch (e) {
        if (e instanceof DurationError) return bad(path, DURATION_HINT, v);
        throw e;
      }
    }
    case "quantity": {
      const s = typeof v === "number" && Number.isFinite(v) ? String(v) : v;
      if (typeof s === "string" && QUANTITY_RE.test(s)) return ok(s);
      return bad(path, 'must be a quantity such as "0", "64Ki" or "1M"', v);
    }
  }
}

/** Decodes a value of any kind (null means "unset" and yields undefined). */
function decodeValue(kind: Kind, v: unknown, path: string, errs: FieldError[], unset: Set<string>): unknown {
  if (v === null || v === undefined) {
    unset.add(path);
    return undefined;
  }
  if (typeof kind === "string") {
    switch (kind) {
      case "stringList": {
        if (!Array.isArray(v)) {
          errs.push(fieldError(path, "must be a list of strings", v));
          return undefined;
        }
        const out: string[] = [];
        v.forEach((item, i) => {
          if (typeof item === "string") out.push(item);
          else errs.push(fieldError(`${path}[${i}]`, "must be a string", item));
        });
        return out;
      }
      case "boolMap": {
        if (!isMapping(v)) {
          errs.push(fieldError(path, "must be a mapping of names to true/false", v));
          return undefined;
        }
        const out: Record<string, boolean> = {};
        for (const [k, b] of Object.entries(v)) {
          if (typeof b === "boolean") out[k] = b;
          else errs.push(fieldError(`${path}.${k}`, "must be true or false", b));
        }
        return out;
      }
      case "vmodule": {
        if (!Array.isArray(v)) {
          errs.push(fieldError(path, "must be a list of {filePattern, verbosity}", v));
          return undefined;
        }
        const out: VModuleItem[] = [];
        v.forEach((item, i) => {
          const p = `${path}[${i}]`;
          const d = decodeValue({ filePattern: "string", verbosity: "uint32" }, item, p, errs, new Set());
          if (isMapping(d)) {
            out.push({
              filePattern: (d.filePattern as string) ?? "",
              verbosity: (d.verbosity as number) ?? 0,
            });
          }
        });
        return out;
      }
      default: {
        const r = decodeScalar(kind, v, path);
        if (r.ok) return r.value;
        errs.push(r.error);
        return undefined;
      }
    }
  }
  if (!isMapping(v)) {
    errs.push(fieldError(path, "must be a mapping", v));
    return undefined;
  }
  const out: Record<string, unknown> = {};
  for (const [k, item] of Object.entries(v)) {
    const p = path === "" ? k : `${path}.${k}`;
    const sub = kind[k];
    if (sub === undefined) {
      errs.push(fieldError(p, "unknown field", item));
      continue;
    }
    const d = decodeValue(sub, item, p, errs, unset);
    if (d !== undefined) out[k] = d;
  }
  return out;
}

/** Copies decoded values onto the zero config (deeply, only the fields present). */
function overlay(target: Record<string, unknown>, src: Record<string, unknown>): void {
  for (const [k, v] of Object.entries(src)) {
    const t = target[k];
    if (isMapping(v) && isMapping(t) && k !== "featureGates") overlay(t, v);
    else target[k] = v;
  }
}

function yamlProblem(e: YAMLParseError): FieldError {
  const first = e.message.split("\n")[0].replace(/ at line \d+, column \d+:?$/, "");
  const pos = e.linePos?.[0];
  return { path: pos ? `line ${pos.line}, column ${pos.col}` : "document", problem: first };
}

/**
 * Decodes a configuration document and applies upstream's defaulting; does not run validateConfig
 * (the caller may first lay flags over it, as upstream does for logging flags and --hostname-override).
 * @throws ConfigError
 */
export function decodeConfig(text: string, file: string): KubeProxyConfiguration {
  let doc: unknown;
  try {
    doc = parse(text, { maxAliasCount: MAX_ALIAS_COUNT });
  } catch (e) {
    if (e instanceof YAMLParseError) throw new ConfigError(file, [yamlProblem(e)]);
    // The yaml package signals a "billion laughs" document with a ReferenceError.
    if (e instanceof ReferenceError && /alias count/i.test(e.message)) {
      throw new ConfigError(file, [{
        path: "document",
        problem:
          `too many YAML alias expansions (more than ${MAX_ALIAS_COUNT}): refusing a resource exhaustion attack`,
      }]);
    }
    throw e;
  }
  if (doc === null || doc === undefined) {
    throw new ConfigError(file, [{ path: "document", problem: "empty, expected a KubeProxyConfiguration" }]);
  }
  if (!isMapping(doc)) {
    throw new ConfigError(file, [fieldError("document", "must be a KubeProxyConfiguration mapping", doc)]);
  }
  // apiVersion and kind first: a different object type gets one clear message, not a list of unknown fields.
  if (doc.apiVersion !== CONFIG_API_VERSION) {
    throw new ConfigError(file, [
      fieldError("apiVersion", `must be ${CONFIG_API_VERSION}`, doc.apiVersion ?? undefined),
    ]);
  }
  if (doc.kind !== CONFIG_KIND) {
    throw new ConfigError(file, [fieldError("kind", `must be ${CONFIG_KIND}`, doc.kind ?? undefined)]);
  }
  const errs: FieldError[] = [];
  const unset = new Set<string>();
  const decoded = decodeValue(SCHEMA, doc, "", errs, unset) as Record<string, unknown>;
  if (errs.length > 0) throw new ConfigError(file, errs);

  const config = zeroConfig();
  overlay(config as unknown as Record<string, unknown>, decoded);
  // Go omits these when false/empty; keep the object shape identical to a fresh default.
  for (const fmt of ["json", "text"] as const) {
    if (config.logging.options[fmt].splitStream !== true) delete config.logging.options[fmt].splitStream;
  }
  if (config.logging.vmodule !== undefined && config.logging.vmodule.length === 0) {
    delete config.logging.vmodule;
  }

  const pointerUnset = {} as UnsetPointers;
  for (const [path, key] of Object.entries(POINTER_FIELDS)) {
    pointerUnset[key] = unset.has(path) || !hasPath(doc, path);
  }
  return applyDefaults(config, pointerUnset);
}

function hasPath(doc: Record<string, unknown>, path: string): boolean {
  let cur: unknown = doc;
  for (const part of path.split(".")) {
    if (!isMapping(cur) || !(part in cur)) return false;
    cur = cur[part];
  }
  return cur !== null && cur !== undefined;
}

/**
 * Decodes, defaults and validates a configuration document.
 * @throws ConfigError naming the first problem
 */
export function parseConfig(text: string, file: string): KubeProxyConfiguration {
  const config = decodeConfig(text, file);
  const errs = validateConfig(config);
  if (errs.length > 0) throw new ConfigError(file, errs);
  return config;
}

/** Reads the file's text; an unreadable file is a ConfigError too. */
export async function readConfigFile(file: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (e) {
    const code = (e as { code?: string }).code;
    const why = code === "ENOENT"
      ? "no such file"
      : code === "EACCES"
      ? "permission denied"
      : (e as Error).message;
    throw new ConfigError(file, [{ path: "file", problem: `cannot read: ${why}` }]);
  }
}

/**
 * `--config FILE`: reads, decodes, defaults and validates the file.
 * @throws ConfigError with the one line to print
 */
export async function loadConfigFile(file: string): Promise<KubeProxyConfiguration> {
  return parseConfig(await readConfigFile(file), file);
}
