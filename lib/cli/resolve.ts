/**
 * Turns the command line (and the --config file) into what the process should do, with kube-proxy's
 * precedence rules (cmd/kube-proxy/app/options.go Complete):
 *
 * 1. Without --config: start from the defaulted configuration and apply every flag in order.
 *    Deprecated --healthz-port / --metrics-port then adjust the server addresses (not with
 *    --write-config-to).
 * 2. With --config: the file replaces the configuration and the kube-proxy configuration flags are
 *    ignored (edgeproxy warns which ones), except the logging flags, which are laid over the file
 *    (`--config f -v=4` works), and --hostname-override.
 * 3. In both cases --hostname-override (trimmed, lower-cased) wins, the result is validated, and
 *    edgeproxy's own flags, --master, --cleanup and --init-only always apply.
 *
 * Every error is a single line (FlagError, ConfigError or UsageError), meant to be printed as is.
 */
import { ConfigError, decodeConfig, readConfigFile } from "../config/load.ts";
import { appendPortIfNeeded } from "../config/defaults.ts";
import { type FieldError, formatFieldError } from "../config/field_error.ts";
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import { configWarnings, validateConfig } from "../config/validate.ts";
import { KubeconfigError } from "../k8s/kubeconfig_error.ts";
import { type FlagDef, flagForConfigPath, FLAGS, type FlagState, newFlagState } from "./flags.ts";
import { flagDisplayName, FlagError, parseArgv, parseGoBool } from "./pflag.ts";

/** A one-line command-line problem that is neither a flag syntax error nor a bad config file. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** True for the errors whose message is meant for the operator as is (one line, exit code 1). */
export function isUserError(e: unknown): e is Error {
  return e instanceof FlagError || e instanceof ConfigError || e instanceof UsageError ||
    e instanceof KubeconfigError;
}

/** What to do. */
export type Action = "help" | "version" | "write-config" | "run";

/** The resolved command line. */
export interface Invocation {
  action: Action;
  /**
   * The effective, validated configuration, as --write-config-to writes it (without the platform
   * defaults; see applyPlatformDefaults for the form to run with).
   */
  config: KubeProxyConfiguration;
  options: EdgeproxyOptions;
  configFile: string;
  writeConfigTo: string;
  /** --version=raw was asked for. */
  versionRaw: boolean;
  /** Messages to log as warnings once logging is configured (deprecated and ignored flags, ...). */
  warnings: string[];
}

/** How the resolver reads the --config file (tests hand in their own). */
export interface ResolveIO {
  readConfig(file: string): Promise<string>;
}

const defaultIO: ResolveIO = { readConfig: readConfigFile };

interface Assignment {
  flag: FlagDef;
  raw: string;
}

function versionRequested(v: string): boolean {
  if (v === "") return false;
  try {
    return parseGoBool(v);
  } catch {
    return true; // "raw" or a version string
  }
}

/** Reports a validation error of a flag-built configuration against the flag that set the field. */
function flagConfigError(e: FieldError, changed: Map<string, Assignment>): Error {
  const flag = flagForConfigPath(e.path, [...changed.values()].map((a) => a.flag));
  if (flag === undefined) return new UsageError(`invalid configuration: ${formatFieldError(e)}`);
  const raw = changed.get(flag.name)!.raw;
  const got = e.got !== undefined && e.got !== raw && e.got !== JSON.stringify(raw) ? ` (got ${e.got})` : "";
  return new FlagError(
    `invalid argument ${JSON.stringify(raw)} for ${
      JSON.stringify(flagDisplayName(flag))
    } flag: ${e.problem}${got}`,
  );
}

/**
 * Parses argv (without the program name) and, when --config is given, reads the file.
 * @throws FlagError | ConfigError | UsageError — one line each
 */
export async function resolveInvocation(
  argv: readonly string[],
  io: ResolveIO = defaultIO,
): Promise<Invocation> {
  const state: FlagState = newFlagState();
  const assignments: Assignment[] = [];
  const warnings: string[] = [];
  const warnedDeprecated = new Set<string>();
  const { positional } = parseArgv(argv, FLAGS, (flag, raw) => {
    flag.set(state, raw);
    assignments.push({ flag, raw });
    if (flag.deprecated !== undefined && !warnedDeprecated.has(flag.name)) {
      warnedDeprecated.add(flag.name);
      warnings.push(`Flag --${flag.name} has been deprecated, ${flag.deprecated}`);
    }
  });
  if (positional.some((a) => a !== "")) {
    throw new UsageError(`"edgeproxy" does not take any arguments, got ${JSON.stringify(positional)}`);
  }
  // Last assignment per flag, in first-use order.
  const changed = new Map<string, Assignment>();
  for (const a of assignments) changed.set(a.flag.name, a);

  const base = {
    options: state.options,
    configFile: state.cli.configFile,
    writeConfigTo: state.cli.writeConfigTo,
    versionRaw: state.cli.version === "raw",
    warnings,
  };
  if (state.cli.help) return { action: "help", config: state.config, ...base };
  if (versionRequested(state.cli.version)) return { action: "version", config: state.config, ...base };

  let config: KubeProxyConfiguration;
  let errors: FieldError[];
  if (state.cli.configFile !== "") {
    const file = state.cli.configFile;
    const decoded = decodeConfig(await io.readConfig(file), file);
    const fileVModule = decoded.logging.vmodule ?? [];
    const overlay: FlagState = { ...state, config: decoded, touched: new Set() };
    for (const a of assignments) if (a.flag.scope === "logging") a.flag.set(overlay, a.raw);
    if (changed.has("vmodule") && fileVModule.length > 0) {
      decoded.logging.vmodule = [...(decoded.logging.vmodule ?? []), ...fileVModule];
    }
    const ignored = [...changed.values()].filter((a) => a.flag.scope === "config").map((a) =>
      `--${a.flag.name}`
    );
    if (ignored.length > 0) {
      warnings.push(`flags ignored because --config is set (as kube-proxy does): ${ignored.join(", ")}`);
    }
    config = decoded;
    applyHostnameOverride(config, state.cli.hostnameOverride);
    errors = validateConfig(config);
    if (errors.length > 0) {
      const e = errors[0];
      const overridingFlag = flagForConfigPath(
        e.path,
        [...changed.values()].filter((a) => a.flag.scope === "logging").map((a) => a.flag),
      );
      if (overridingFlag !== undefined) throw flagConfigError(e, changed);
      throw new ConfigError(file, errors);
    }
  } else {
    config = state.config;
    if (state.cli.writeConfigTo === "") {
      config.healthzBindAddress = addressFromDeprecatedFlags(
        config.healthzBindAddress,
        state.cli.healthzPort,
      );
      config.metricsBindAddress = addressFromDeprecatedFlags(
        config.metricsBindAddress,
        state.cli.metricsPort,
      );
    }
    applyHostnameOverride(config, state.cli.hostnameOverride);
    errors = validateConfig(config);
    if (errors.length > 0) throw flagConfigError(errors[0], changed);
  }
  warnings.push(...configWarnings(config));
  return { action: state.cli.writeConfigTo !== "" ? "write-config" : "run", config, ...base };
}

/** Upstream addressFromDeprecatedFlags: port 0 disables the server, otherwise a bare IP gets the port. */
function addressFromDeprecatedFlags(addr: string, port: number): string {
  if (port === 0) return "";
  return appendPortIfNeeded(addr, port);
}

/** Upstream processHostnameOverrideFlag: a non-empty flag wins over the file, trimmed and lower-cased. */
function applyHostnameOverride(config: KubeProxyConfiguration, flagValue: string): void {
  if (flagValue === "") return;
  const name = flagValue.trim();
  if (name === "") throw new UsageError("empty hostname-override is invalid");
  config.hostnameOverride = name.toLowerCase();
}
