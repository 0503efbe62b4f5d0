/**
 * The command-line flags: every kube-proxy flag (cmd/kube-proxy/app/options.go ≈v1.31 on Linux, plus the
 * component-base logging flags) with its type, help text and the KubeProxyConfiguration field it sets,
 * and edgeproxy's own flags, which set EdgeproxyOptions. Values are parsed with Go's rules (lib/cli/pflag.ts).
 *
 * Scope says what survives `--config` (upstream Options.Complete): "config" flags are ignored when a file
 * is given, "logging" flags are laid over the file, "process" flags (actions, --master,
 * --hostname-override, edgeproxy's own) always apply.
 */
import { DurationError, formatDuration, parseDuration } from "../config/duration.ts";
import {
  FlagError,
  type FlagSyntax,
  FlagValueError,
  parseCSVRecord,
  parseGoBool,
  parseGoFloat32,
  parseGoInt,
  parseGoUint,
  parseMapStringBool,
} from "./pflag.ts";
import { defaultConfig, defaultOptions, PROXY_HEALTHZ_PORT, PROXY_STATUS_PORT } from "../config/defaults.ts";
import { parseIPLegacy, splitHostPort } from "../net/go_net.ts";
import type { EdgeproxyOptions, KubeProxyConfiguration, VModuleItem } from "../config/types.ts";
import { portRangeProblem, SUPPORTED_PROXY_MODES, SUPPORTED_PROXY_MODES_TEXT } from "../config/validate.ts";

/** Settings that live only on the command line. */
export interface CliSettings {
  configFile: string;
  writeConfigTo: string;
  /** Raw --hostname-override (trimmed and lower-cased when applied). */
  hostnameOverride: string;
  /** Deprecated --healthz-port / --metrics-port (upstream defaults: the standard ports). */
  healthzPort: number;
  metricsPort: number;
  /** --version value: "" (not given), "true", "raw", or anything else (printed the same way). */
  version: string;
  help: boolean;
}

/** Everything flags write into. */
export interface FlagState {
  config: KubeProxyConfiguration;
  options: EdgeproxyOptions;
  cli: CliSettings;
  /** List/map flags already set once: pflag replaces the default on the first use, then appends. */
  touched: Set<string>;
}

/** A fresh state: the defaulted configuration and options, nothing set on the command line. */
export function newFlagState(): FlagState {
  return {
    config: defaultConfig(),
    options: defaultOptions(),
    cli: {
      configFile: "",
      writeConfigTo: "",
      hostnameOverride: "",
      healthzPort: PROXY_HEALTHZ_PORT,
      metricsPort: PROXY_STATUS_PORT,
      version: "",
      help: false,
    },
    touched: new Set(),
  };
}

/** Help groups, in display order. */
export const FLAG_GROUPS = [
  "Configuration",
  "Actions",
  "Kubernetes API",
  "Node and servers",
  "iptables proxier",
  "IPVS proxier",
  "Local traffic detection",
  "conntrack and process",
  "Feature gates",
  "Logging",
  "edgeproxy",
  "Accepted for compatibility, no effect",
] as const;

/** A help group name. */
export type FlagGroup = typeof FLAG_GROUPS[number];

/** Which flags still apply when --config is given. */
export type FlagScope = "config" | "logging" | "process";

/** One flag. */
export interface FlagDef extends FlagSyntax {
  /** Type name shown in --help, as pflag prints it (string, duration, int32, strings, ...). */
  type: string;
  group: FlagGroup;
  usage: string;
  scope: FlagScope;
  /** The v1alpha1 field the flag sets (for precedence and error messages). */
  configPath?: string;
  /** pflag deprecation message: using the flag prints a warning; the flag is hidden from --help. */
  deprecated?: string;
  /** false when edgeproxy accepts the flag but it changes nothing (IPVS, profiling, ...). */
  effective: boolean;
  /** Parses `raw` (Go syntax) and stores it. @throws FlagValueError, or FlagError for a whole-line error */
  set(state: FlagState, raw: string): void;
  /** The default shown in --help ("" when none is shown). */
  defaultText(state: FlagState): string;
}

// ---------------------------------------------------------------------------------------------------
// Field access by v1alpha1 path.

function getPath(obj: unknown, path: string): unknown {
  let cur = obj as Record<string, unknown>;
  for (const p of path.split(".")) cur = cur[p] as Record<string, unknown>;
  return cur;
}

function setPath(obj: unknown, path: string, value: unknown): void {
  const parts = path.split(".");
  let cur = obj as Record<string, unknown>;
  for (const p of parts.slice(0, -1)) cur = cur[p] as Record<string, unknown>;
  cur[parts[parts.length - 1]] = value;
}

function parseDurationFlag(raw: string): number {
  try {
    return parseDuration(raw);
  } catch (e) {
    if (e instanceof DurationError) throw new FlagValueError(e.message);
    throw e;
  }
}

const quoted = (s: string) => (s === "" ? "" : JSON.stringify(s));
const nonZero = (n: number) => (n === 0 ? "" : String(n));
const durationText = (ms: number) => (ms === 0 ? "" : formatDuration(ms));
const trueOnly = (b: boolean) => (b ? "true" : "");

type Common =
  & Pick<FlagDef, "group" | "usage">
  & Partial<Pick<FlagDef, "deprecated" | "effective" | "shorthand">>;

function base(name: string, type: string, scope: FlagScope, c: Common): Omit<FlagDef, "set" | "defaultText"> {
  return { name, type, scope, effective: true, ...c };
}

/** A flag storing into a config field. */
function cfg(
  name: string,
  type: "string" | "bool" | "int32" | "float32" | "duration" | "strings",
  path: string,
  c: Common,
  scope: FlagScope = "config",
): FlagDef {
  const def = { ...base(name, type, scope, c), configPath: path };
  switch (type) {
    case "string":
      return {
        ...def,
        set: (s, raw) => setPath(s.config, path, raw),
        defaultText: (s) => quoted(getPath(s.config, path) as string),
      };
    case "bool":
      return {
        ...def,
        noOptDefVal: "true",
        set: (s, raw) => setPath(s.config, path, parseGoBool(raw)),
        defaultText: (s) => trueOnly(getPath(s.config, path) as boolean),
      };
    case "int32":
      return {
        ...def,
        set: (s, raw) => setPath(s.config, path, parseGoInt(raw, 32)),
        defaultText: (s) => nonZero(getPath(s.config, path) as number),
      };
    case "float32":
      return {
        ...def,
        set: (s, raw) => setPath(s.config, path, parseGoFloat32(raw)),
        defaultText: (s) => nonZero(getPath(s.config, path) as number),
      };
    case "duration":
      return {
        ...def,
        set: (s, raw) => setPath(s.config, path, parseDurationFlag(raw)),
        defaultText: (s) => durationText(getPath(s.config, path) as number),
      };
    case "strings":
      return {
        ...def,
        set: (s, raw) => {
          const items = parseCSVRecord(raw);
          const prev = s.touched.has(name) ? (getPath(s.config, path) as string[] | null) ?? [] : [];
          s.touched.add(name);
          setPath(s.config, path, [...prev, ...items]);
        },
        defaultText: (s) => {
          const v = getPath(s.config, path) as string[] | null;
          return v && v.length > 0 ? `[${v.join(",")}]` : "";
        },
      };
  }
}

/** A flag storing into EdgeproxyOptions. */
function opt<K extends keyof EdgeproxyOptions>(
  name: string,
  type: string,
  key: K,
  parse: (raw: string) => EdgeproxyOptions[K],
  show: (v: EdgeproxyOptions[K]) => string,
  c: Common,
  noOptDefVal?: string,
): FlagDef {
  return {
    ...base(name, type, "process", c),
    ...(noOptDefVal !== undefined ? { noOptDefVal } : {}),
    set: (s, raw) => {
      s.options[key] = parse(raw);
    },
    defaultText: (s) => show(s.options[key]),
  };
}

/** A flag storing into CliSettings. */
function cli<K extends keyof CliSettings>(
  name: string,
  type: string,
  key: K,
  parse: (raw: string) => CliSettings[K],
  c: Common,
  extra: Partial<FlagDef> = {},
): FlagDef {
  return {
    ...base(name, type, "process", c),
    set: (s, raw) => {
      s.cli[key] = parse(raw);
    },
    defaultText: () => "",
    ...extra,
  };
}

function positiveDuration(raw: string): number {
  const ms = parseDurationFlag(raw);
  if (ms <= 0) throw new FlagValueError("must be greater than 0");
  return ms;
}

function nonNegativeDuration(raw: string): number {
  const ms = parseDurationFlag(raw);
  if (ms < 0) throw new FlagValueError("must be greater than or equal to 0");
  return ms;
}

/** utilflag.IPVar. */
function ipValue(raw: string): string {
  if (raw !== "" && parseIPLegacy(raw) === null) {
    throw new FlagValueError(`${JSON.stringify(raw)} is not a valid IP address`);
  }
  return raw;
}

/** utilflag.IPPortVar: "", an IP, or IP:port. */
function ipPortValue(raw: string): string {
  if (raw === "" || parseIPLegacy(raw) !== null) return raw;
  const hp = splitHostPort(raw);
  if (hp === null) {
    throw new FlagValueError(`${JSON.stringify(raw)} is not in a valid format (ip or ip:port)`);
  }
  if (parseIPLegacy(hp.host) === null) {
    throw new FlagValueError(`${JSON.stringify(hp.host)} is not a valid IP address`);
  }
  if (!/^[0-9]+$/.test(hp.port) || Number(hp.port) > 65535) {
    throw new FlagValueError(`${JSON.stringify(hp.port)} is not a valid number`);
  }
  return raw;
}

/** component-base VModuleConfiguration: "pattern=N,pattern2=M". */
export function parseVModule(raw: string): VModuleItem[] {
  const out: VModuleItem[] = [];
  for (const pat of raw.split(",")) {
    if (pat === "") continue;
    const parts = pat.split("=");
    if (parts.length !== 2 || parts[0] === "" || parts[1] === "") {
      throw new FlagValueError(`${JSON.stringify(pat)} does not have the pattern=N format`);
    }
    let v: number;
    try {
      v = parseGoUint(parts[1], 31);
    } catch (e) {
      throw new FlagValueError(`parsing verbosity in ${JSON.stringify(pat)}: ${(e as Error).message}`);
    }
    out.push({ filePattern: parts[0], verbosity: v });
  }
  return out;
}

const QUANTITY_RE = /^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$/;

function quantityValue(raw: string): string {
  if (!QUANTITY_RE.test(raw)) {
    throw new FlagValueError(
      "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    );
  }
  return raw;
}

function logOptionFlags(fmt: "json" | "text"): FlagDef[] {
  const upper = fmt === "json" ? "JSON" : "text";
  return [
    {
      ...base(`log-${fmt}-split-stream`, "bool", "logging", {
        group: "Logging",
        usage: `[Alpha] In ${upper} format, write error messages to stderr and info messages to stdout. ` +
          "Needs the LoggingAlphaOptions feature gate. (edgeproxy writes all log lines to stderr.)",
        effective: false,
      }),
      configPath: `logging.options.${fmt}.splitStream`,
      noOptDefVal: "true",
      set: (s, raw) => {
        const o = s.config.logging.options[fmt];
        if (parseGoBool(raw)) o.splitStream = true;
        else delete o.splitStream;
      },
      defaultText: () => "",
    },
    {
      ...base(`log-${fmt}-info-buffer-size`, "quantity", "logging", {
        group: "Logging",
        usage: `[Alpha] In ${upper} format with split output streams, buffer info messages up to this size ` +
          "(512, 1K, 2Ki, 3M, ...). Needs the LoggingAlphaOptions feature gate. (No effect in edgeproxy.)",
        effective: false,
      }),
      configPath: `logging.options.${fmt}.infoBufferSize`,
      set: (s, raw) => {
        s.config.logging.options[fmt].infoBufferSize = quantityValue(raw);
      },
      defaultText: () => "",
    },
  ];
}

const IPVS = "IPVS proxier" as const;
const NO_EFFECT = "Accepted for compatibility, no effect" as const;

/** Every flag edgeproxy accepts, in help order within each group. */
export const FLAGS: readonly FlagDef[] = [
  // Configuration
  cli("config", "string", "configFile", (r) => r, {
    group: "Configuration",
    usage:
      "The path to the configuration file (KubeProxyConfiguration v1alpha1, YAML or JSON). When set, the " +
      "other kube-proxy flags are ignored, except --hostname-override, --master, the logging flags and the " +
      "actions; edgeproxy's own flags always apply.",
  }),
  cli("write-config-to", "string", "writeConfigTo", (r) => r, {
    group: "Configuration",
    usage:
      "If set, write the configuration (defaults plus flags, or the --config file) to this file as YAML " +
      "and exit.",
  }),

  // Actions
  opt("cleanup", "bool", "cleanup", parseGoBool, trueOnly, {
    group: "Actions",
    usage: "If true cleanup the iptables rules kube-proxy/edgeproxy created, and exit.",
  }, "true"),
  opt("init-only", "bool", "initOnly", parseGoBool, trueOnly, {
    group: "Actions",
    usage: "If true, perform the initialization steps that need full root privileges (sysctls, conntrack " +
      "limits), and then exit. After doing this, edgeproxy can run with only CAP_NET_ADMIN.",
  }, "true"),
  cli("version", "version", "version", (r) => r, {
    group: "Actions",
    usage: "Print version information and quit (--version, --version=raw).",
  }, { noOptDefVal: "true" }),
  cli("help", "bool", "help", parseGoBool, {
    group: "Actions",
    usage: "Show this help and quit.",
    shorthand: "h",
  }, {
    noOptDefVal: "true",
  }),

  // Kubernetes API
  cfg("kubeconfig", "string", "clientConnection.kubeconfig", {
    group: "Kubernetes API",
    usage: "Path to kubeconfig file with authorization information (the master location can be overridden " +
      "by the master flag).",
  }),
  opt("master", "string", "master", (r) => r, quoted, {
    group: "Kubernetes API",
    usage: "The address of the Kubernetes API server (overrides any value in kubeconfig).",
  }),
  cfg("kube-api-content-type", "string", "clientConnection.contentType", {
    group: "Kubernetes API",
    usage: "Content type of requests sent to apiserver. (Accepted; edgeproxy always reads JSON.)",
    effective: false,
  }),
  cfg("kube-api-qps", "float32", "clientConnection.qps", {
    group: "Kubernetes API",
    usage: "QPS to use while talking with kubernetes apiserver.",
  }),
  cfg("kube-api-burst", "int32", "clientConnection.burst", {
    group: "Kubernetes API",
    usage: "Burst to use while talking with kubernetes apiserver.",
  }),
  cfg("config-sync-period", "duration", "configSyncPeriod", {
    group: "Kubernetes API",
    usage: "How often configuration from the apiserver is refreshed. Must be greater than 0.",
  }),

  // Node and servers
  cli("hostname-override", "string", "hostnameOverride", (r) => r, {
    group: "Node and servers",
    usage: "If non-empty, will be used as the name of the Node edgeproxy is running on (lower-cased). If " +
      "unset, the node name is the host's hostname. Applies even with --config.",
  }),
  {
    ...base("bind-address", "ip", "config", {
      group: "Node and servers",
      usage:
        "Overrides edgeproxy's idea of what its node's primary IP is. (Historical name: no socket is bound " +
        "to it.)",
    }),
    configPath: "bindAddress",
    set: (s, raw) => {
      s.config.bindAddress = ipValue(raw);
    },
    defaultText: (s) => s.config.bindAddress,
  },
  cfg("bind-address-hard-fail", "bool", "bindAddressHardFail", {
    group: "Node and servers",
    usage: "If true edgeproxy will treat failure to bind to a port as fatal and exit.",
  }),
  {
    ...base("healthz-bind-address", "ipport", "config", {
      group: "Node and servers",
      usage: "The IP address and port for the health check server to serve on. Set empty to disable.",
    }),
    configPath: "healthzBindAddress",
    set: (s, raw) => {
      s.config.healthzBindAddress = ipPortValue(raw);
    },
    defaultText: (s) => s.config.healthzBindAddress,
  },
  {
    ...base("metrics-bind-address", "ipport", "config", {
      group: "Node and servers",
      usage: 'The IP address and port for the metrics server to serve on (set to "0.0.0.0:10249" / ' +
        '"[::]:10249" to bind on all interfaces). Set empty to disable.',
    }),
    configPath: "metricsBindAddress",
    set: (s, raw) => {
      s.config.metricsBindAddress = ipPortValue(raw);
    },
    defaultText: (s) => s.config.metricsBindAddress,
  },
  {
    ...base("healthz-port", "int32", "config", {
      group: "Node and servers",
      usage: "The port to bind the health check server. Use 0 to disable.",
      deprecated: "This flag is deprecated and will be removed in a future release. Please use " +
        "--healthz-bind-address instead.",
    }),
    configPath: "healthzBindAddress",
    set: (s, raw) => {
      s.cli.healthzPort = parseGoInt(raw, 32);
    },
    defaultText: () => String(PROXY_HEALTHZ_PORT),
  },
  {
    ...base("metrics-port", "int32", "config", {
      group: "Node and servers",
      usage: "The port to bind the metrics server. Use 0 to disable.",
      deprecated: "This flag is deprecated and will be removed in a future release. Please use " +
        "--metrics-bind-address instead.",
    }),
    configPath: "metricsBindAddress",
    set: (s, raw) => {
      s.cli.metricsPort = parseGoInt(raw, 32);
    },
    defaultText: () => String(PROXY_STATUS_PORT),
  },
  cfg("profiling", "bool", "enableProfiling", {
    group: "Node and servers",
    usage:
      "If true enables profiling via web interface on /debug/pprof handler. (Accepted; edgeproxy has no " +
      "Go profiler.)",
    effective: false,
  }),
  cfg("show-hidden-metrics-for-version", "string", "showHiddenMetricsForVersion", {
    group: "Node and servers",
    usage:
      "The previous version for which you want to show hidden metrics, as <major>.<minor>, e.g. '1.30'. " +
      "(Accepted; edgeproxy has no hidden metrics.)",
    effective: false,
  }),

  // iptables proxier
  {
    ...base("proxy-mode", "ProxyMode", "config", {
      group: "iptables proxier",
      usage: "Which proxy mode to use: 'iptables' (the default when empty), 'nftables', 'ipvs' (deprecated " +
        "upstream; prefer nftables), or 'userspace' (a round-robin proxy in the process, for nodes without " +
        "kernel load balancing; see --userspace-portals).",
    }),
    configPath: "mode",
    set: (s, raw) => {
      if (!SUPPORTED_PROXY_MODES.includes(raw)) {
        throw new FlagError(
          `edgeproxy implements only --proxy-mode=${SUPPORTED_PROXY_MODES_TEXT} (got ${JSON.stringify(raw)})`,
        );
      }
      s.config.mode = raw;
    },
    defaultText: () => "",
  },
  cfg("iptables-masquerade-bit", "int32", "iptables.masqueradeBit", {
    group: "iptables proxier",
    usage:
      "The bit of the fwmark space to mark packets requiring SNAT with. Must be within the range [0, 31].",
  }),
  cfg("masquerade-all", "bool", "iptables.masqueradeAll", {
    group: "iptables proxier",
    usage: "SNAT all traffic sent via Service cluster IPs. This may be required with some CNI plugins.",
  }),
  cfg("iptables-localhost-nodeports", "bool", "iptables.localhostNodePorts", {
    group: "iptables proxier",
    usage:
      "If false, disable the legacy behavior of allowing NodePort services to be accessed via localhost " +
      "(IPv4 only).",
  }),
  cfg("iptables-sync-period", "duration", "iptables.syncPeriod", {
    group: "iptables proxier",
    usage: "An interval (e.g. '5s', '1m', '2h22m') indicating how frequently various re-synchronizing and " +
      "cleanup operations are performed. Must be greater than 0.",
  }),
  cfg("iptables-min-sync-period", "duration", "iptables.minSyncPeriod", {
    group: "iptables proxier",
    usage:
      "The minimum period between iptables rule resyncs (e.g. '5s', '1m', '2h22m'). A value of 0 means " +
      "every Service or EndpointSlice change will result in an immediate iptables resync.",
  }),
  cfg("nodeport-addresses", "strings", "nodePortAddresses", {
    group: "iptables proxier",
    usage:
      "A list of CIDR ranges that contain valid node IPs, or alternatively, the single string 'primary'. " +
      "NodePorts are then accepted only on node IPs in those ranges (or on the node's primary IPs). If unset, " +
      "NodePort connections are accepted on all local IPs.",
  }),

  // Local traffic detection
  cfg("detect-local-mode", "string", "detectLocalMode", {
    group: "Local traffic detection",
    usage: "Mode to use to detect local traffic: ClusterCIDR (the default when empty), NodeCIDR, " +
      "BridgeInterface or InterfaceNamePrefix.",
  }),
  cfg("cluster-cidr", "string", "clusterCIDR", {
    group: "Local traffic detection",
    usage:
      "The CIDR range of the pods in the cluster (for dual-stack clusters, a comma-separated dual-stack " +
      "pair). With --detect-local-mode=ClusterCIDR, traffic whose source IP is in this range is local.",
  }),
  cfg("pod-bridge-interface", "string", "detectLocal.bridgeInterface", {
    group: "Local traffic detection",
    usage:
      "A bridge interface name. With --detect-local-mode=BridgeInterface, traffic that originates from " +
      "this bridge is local.",
  }),
  cfg("pod-interface-name-prefix", "string", "detectLocal.interfaceNamePrefix", {
    group: "Local traffic detection",
    usage:
      "An interface name prefix. With --detect-local-mode=InterfaceNamePrefix, traffic that originates " +
      "from any interface whose name begins with this prefix is local.",
  }),

  // conntrack and process
  cfg("oom-score-adj", "int32", "oomScoreAdj", {
    group: "conntrack and process",
    usage:
      "The oom-score-adj value for the edgeproxy process. Values must be within the range [-1000, 1000].",
  }),
  cfg("conntrack-max-per-core", "int32", "conntrack.maxPerCore", {
    group: "conntrack and process",
    usage: "Maximum number of NAT connections to track per CPU core (0 to leave the limit as-is and ignore " +
      "conntrack-min).",
  }),
  cfg("conntrack-min", "int32", "conntrack.min", {
    group: "conntrack and process",
    usage: "Minimum number of conntrack entries to allocate, regardless of conntrack-max-per-core (set " +
      "conntrack-max-per-core=0 to leave the limit as-is).",
  }),
  cfg("conntrack-tcp-timeout-established", "duration", "conntrack.tcpEstablishedTimeout", {
    group: "conntrack and process",
    usage: "Idle timeout for established TCP connections (0 to leave as-is).",
  }),
  cfg("conntrack-tcp-timeout-close-wait", "duration", "conntrack.tcpCloseWaitTimeout", {
    group: "conntrack and process",
    usage: "NAT timeout for TCP connections in the CLOSE_WAIT state.",
  }),
  cfg("conntrack-tcp-be-liberal", "bool", "conntrack.tcpBeLiberal", {
    group: "conntrack and process",
    usage: "Enable liberal mode for tracking TCP packets by setting nf_conntrack_tcp_be_liberal to 1.",
  }),
  cfg("conntrack-udp-timeout", "duration", "conntrack.udpTimeout", {
    group: "conntrack and process",
    usage: "Idle timeout for UNREPLIED UDP connections (0 to leave as-is).",
  }),
  cfg("conntrack-udp-timeout-stream", "duration", "conntrack.udpStreamTimeout", {
    group: "conntrack and process",
    usage: "Idle timeout for ASSURED UDP connections (0 to leave as-is).",
  }),

  // Feature gates
  {
    ...base("feature-gates", "mapStringBool", "config", {
      group: "Feature gates",
      usage: "A set of key=value pairs that describe feature gates for alpha/experimental features, e.g. " +
        "'LoggingAlphaOptions=true'. Repeating the flag adds to the set.",
    }),
    configPath: "featureGates",
    set: (s, raw) => {
      const parsed = parseMapStringBool(raw);
      const prev = s.touched.has("feature-gates") ? s.config.featureGates : {};
      s.touched.add("feature-gates");
      s.config.featureGates = { ...prev, ...parsed };
    },
    defaultText: () => "",
  },

  // Logging (component-base)
  {
    ...base("v", "Level", "logging", {
      group: "Logging",
      shorthand: "v",
      usage: "Number for the log level verbosity: 0-3 info (2-3 more detail), 4-5 debug, 6 and more trace.",
    }),
    configPath: "logging.verbosity",
    set: (s, raw) => {
      s.config.logging.verbosity = parseGoUint(raw, 32);
    },
    defaultText: (s) => nonZero(s.config.logging.verbosity),
  },
  {
    ...base("vmodule", "pattern=N,...", "logging", {
      group: "Logging",
      usage:
        "Comma-separated list of pattern=N settings for file-filtered logging (only works for text log " +
        "format). (Accepted; edgeproxy logs by global verbosity only.)",
      effective: false,
    }),
    configPath: "logging.vmodule",
    set: (s, raw) => {
      const items = parseVModule(raw);
      const prev = s.touched.has("vmodule") ? s.config.logging.vmodule ?? [] : [];
      s.touched.add("vmodule");
      const all = [...prev, ...items];
      if (all.length > 0) s.config.logging.vmodule = all;
      else delete s.config.logging.vmodule;
    },
    defaultText: () => "",
  },
  cfg("logging-format", "string", "logging.format", {
    group: "Logging",
    usage: 'Sets the log format. Permitted formats: "json", "text" (text: klog\'s lines on stderr; json: ' +
      "one object per line on stderr, Kubernetes' JSON schema).",
  }, "logging"),
  cfg("log-flush-frequency", "duration", "logging.flushFrequency", {
    group: "Logging",
    usage: "Maximum number of seconds between log flushes. (Accepted; edgeproxy does not buffer log lines.)",
    effective: false,
  }, "logging"),
  ...logOptionFlags("json"),
  ...logOptionFlags("text"),

  // edgeproxy's own
  opt("state-dir", "string", "stateDir", (r) => r, quoted, {
    group: "edgeproxy",
    usage: "Directory of the last-known-state cache, used to program rules at start when the apiserver is " +
      'unreachable. "" disables the cache.',
  }),
  opt(
    "api-mode",
    "string",
    "apiMode",
    (raw) => {
      if (raw !== "watch" && raw !== "poll") throw new FlagValueError('must be "watch" or "poll"');
      return raw;
    },
    quoted,
    {
      group: "edgeproxy",
      usage: "How to follow the apiserver: 'watch' (list+watch, like kube-proxy) or 'poll' (for links that " +
        "drop long-lived connections: watches bounded to --poll-interval, resumed at once; LISTs every " +
        "--poll-interval only if a proxy on the way buffers responses).",
    },
  ),
  opt("poll-interval", "duration", "pollInterval", positiveDuration, durationText, {
    group: "edgeproxy",
    usage:
      "With --api-mode=poll, how long a watch stays open (its timeoutSeconds; over HTTP/2, once the link " +
      "streams, 3 times this for all but the EndpointSlices watch), and the time between two lists when " +
      "watches are buffered. Must be greater than 0.",
  }),
  opt("manifests", "string", "manifests", (r) => r, quoted, {
    group: "edgeproxy",
    usage:
      "Read Services, EndpointSlices, the Node and ServiceCIDRs from this YAML/JSON file or directory instead of the apiserver.",
  }),
  opt("dry-run", "bool", "dryRun", parseGoBool, trueOnly, {
    group: "edgeproxy",
    usage: "Compute the rules and print the iptables-restore input instead of applying it.",
  }, "true"),
  opt("cache-start-deadline", "duration", "cacheStartDeadline", nonNegativeDuration, durationText, {
    group: "edgeproxy",
    usage: "How long to wait for the apiserver at start before programming the rules from the state cache.",
  }),
  opt(
    "userspace-portals",
    "string",
    "userspacePortals",
    (raw) => {
      if (raw !== "iptables" && raw !== "none") throw new FlagValueError('must be "iptables" or "none"');
      return raw;
    },
    quoted,
    {
      group: "edgeproxy",
      usage:
        "With --proxy-mode=userspace, how service addresses reach the proxy: 'iptables' (REDIRECT/DNAT " +
        "portal rules) or 'none' (service IPs become local addresses; no netfilter).",
    },
  ),
  opt("udp-timeout", "duration", "udpIdleTimeout", positiveDuration, durationText, {
    group: "edgeproxy",
    usage: "With --proxy-mode=userspace, how long an idle UDP session is kept open. Must be greater than 0.",
  }),

  // IPVS mode (--proxy-mode=ipvs)
  cfg("ipvs-sync-period", "duration", "ipvs.syncPeriod", {
    group: IPVS,
    usage: "IPVS resync interval.",
  }),
  cfg("ipvs-min-sync-period", "duration", "ipvs.minSyncPeriod", {
    group: IPVS,
    usage: "Minimum period between IPVS rule resyncs.",
  }),
  cfg("ipvs-scheduler", "string", "ipvs.scheduler", {
    group: IPVS,
    usage: "The ipvs scheduler type when proxy mode is ipvs.",
  }),
  cfg("ipvs-exclude-cidrs", "strings", "ipvs.excludeCIDRs", {
    group: IPVS,
    usage:
      "A comma-separated list of CIDRs which the ipvs proxier should not touch when cleaning up IPVS rules.",
  }),
  cfg("ipvs-strict-arp", "bool", "ipvs.strictARP", {
    group: IPVS,
    usage: "Enable strict ARP by setting arp_ignore to 1 and arp_announce to 2.",
  }),
  cfg("ipvs-tcp-timeout", "duration", "ipvs.tcpTimeout", {
    group: IPVS,
    usage: "The timeout for idle IPVS TCP connections, 0 to leave as-is.",
  }),
  cfg("ipvs-tcpfin-timeout", "duration", "ipvs.tcpFinTimeout", {
    group: IPVS,
    usage: "The timeout for IPVS TCP connections after receiving a FIN packet, 0 to leave as-is.",
  }),
  cfg("ipvs-udp-timeout", "duration", "ipvs.udpTimeout", {
    group: IPVS,
    usage: "The timeout for IPVS UDP packets, 0 to leave as-is.",
  }),
  {
    ...base("proxy-port-range", "port-range", "config", {
      group: NO_EFFECT,
      usage: "Previously used to configure the userspace proxy, now unused.",
      deprecated: "This flag has no effect and will be removed in a future release.",
      effective: false,
    }),
    configPath: "portRange",
    set: (s, raw) => {
      const p = portRangeProblem(raw);
      if (p !== null) throw new FlagValueError(`${JSON.stringify(raw)} is not a valid port range: ${p}`);
      s.config.portRange = raw;
    },
    defaultText: () => "",
  },
];

/** Looks up a flag by its long name. */
export function findFlag(name: string): FlagDef | undefined {
  return FLAGS.find((f) => f.name === name);
}

/** The flag that sets a v1alpha1 field (or the field containing it, e.g. "nodePortAddresses[1]"). */
export function flagForConfigPath(path: string, among: readonly FlagDef[] = FLAGS): FlagDef | undefined {
  const bare = path.replace(/\[\d+\].*$/, "");
  return among.find((f) =>
    f.configPath !== undefined && (bare === f.configPath || bare.startsWith(f.configPath + "."))
  );
}
