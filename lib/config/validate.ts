/**
 * Semantic validation of a defaulted KubeProxyConfiguration, following upstream
 * pkg/proxy/apis/config/validation/validation.go (≈v1.31) for the Linux iptables proxier, reported with
 * v1alpha1 field paths. Type errors, unknown fields and bad duration syntax are caught earlier, while
 * decoding (lib/config/load.ts).
 *
 * Differences from upstream, on purpose:
 * - any `mode` other than "" / "iptables" / "nftables" / "userspace" / "ipvs" is rejected: edgeproxy implements
 *   only those proxiers;
 * - an empty `metricsBindAddress` is accepted (the flag documents "set empty to disable");
 * - `featureGates` are checked like upstream's feature-gate registry does at start (lib/config/feature_gates.ts):
 *   unknown names and locked gates set to the other value are errors;
 * - `showHiddenMetricsForVersion` is checked for the "<major>.<minor>" form only.
 */
import { formatDuration } from "./duration.ts";
import { featureEnabled, featureGateWarnings, validateFeatureGates } from "./feature_gates.ts";
import { type FieldError, fieldError } from "./field_error.ts";
import { parseCIDRLegacy, parseIPLegacy, splitHostPort } from "../net/go_net.ts";
import type { KubeProxyConfiguration } from "./types.ts";
import { validateIpvsConfig } from "./validate_ipvs.ts";
import { validateSyncPeriods } from "./validate_sync_periods.ts";

/** Proxy modes edgeproxy accepts: blank (meaning iptables), iptables, nftables, userspace and ipvs. */
export const SUPPORTED_PROXY_MODES: readonly string[] = ["", "iptables", "nftables", "userspace", "ipvs"];

/** The supported modes as one phrase for error messages ("iptables|nftables|userspace|ipvs"). */
export const SUPPORTED_PROXY_MODES_TEXT = SUPPORTED_PROXY_MODES.filter((m) => m !== "").join("|");

/** Local-traffic detection modes upstream accepts. */
export const DETECT_LOCAL_MODES: readonly string[] = [
  "ClusterCIDR",
  "NodeCIDR",
  "BridgeInterface",
  "InterfaceNamePrefix",
  "",
];

/** Log formats kube-proxy registers. */
export const LOG_FORMATS: readonly string[] = ["text", "json"];

/** The keyword allowed as the only entry of nodePortAddresses. */
export const NODE_PORT_ADDRESSES_PRIMARY = "primary";

const MAX_INT32 = 2147483647;

/** Problem text for a host:port field, or null when valid (upstream validateHostPort). */
export function hostPortProblem(input: string): { problem: string; value: string } | null {
  const hp = splitHostPort(input);
  if (hp === null) return { problem: "must be IP:port", value: input };
  if (parseIPLegacy(hp.host) === null) return { problem: "must be a valid IP", value: hp.host };
  // strconv.Atoi: optional sign, decimal digits.
  if (!/^[+-]?[0-9]+$/.test(hp.port)) return { problem: "must be a valid port", value: hp.port };
  const p = Number(hp.port);
  if (p < 1 || p > 65535) return { problem: "must be a valid port", value: hp.port };
  return null;
}

/** Problem text for a port range ("", "300-2000", "300+100", "300"), or null (upstream ParsePortRange). */
export function portRangeProblem(value: string): string | null {
  const v = value.trim();
  if (v === "") return null;
  const atoi = (s: string) => (/^[+-]?[0-9]+$/.test(s) ? Number(s) : NaN);
  const hyphen = v.indexOf("-");
  const plus = v.indexOf("+");
  let low: number;
  let high: number;
  if (hyphen < 0 && plus < 0) {
    low = high = atoi(v);
  } else if (hyphen >= 0 && plus < 0) {
    low = atoi(v.slice(0, hyphen));
    high = atoi(v.slice(hyphen + 1));
  } else if (plus >= 0 && hyphen < 0) {
    low = atoi(v.slice(0, plus));
    high = low + atoi(v.slice(plus + 1));
  } else {
    return "unable to parse port range";
  }
  if (Number.isNaN(low) || Number.isNaN(high)) return "must be a valid port range (e.g. 300-2000)";
  if (low > 65535 || high > 65535) return "the port range cannot be greater than 65535";
  if (high < low) return "end port cannot be less than start port";
  return null;
}

/** True when a resource.Quantity string is zero ("0", "0Ki", "0.0"). */
function isZeroQuantity(q: string): boolean {
  const m = /^[+-]?([0-9.]+)/.exec(q);
  return m !== null && Number(m[1]) === 0;
}

function nonNegativeDuration(errs: FieldError[], path: string, ms: number): void {
  if (ms < 0) errs.push(fieldError(path, "must be greater than or equal to 0", formatDuration(ms)));
}

function validateClusterCIDR(errs: FieldError[], clusterCIDR: string): void {
  const cidrs = clusterCIDR.split(",");
  if (cidrs.length > 2) {
    errs.push(
      fieldError(
        "clusterCIDR",
        "must be a either a single CIDR or dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
        clusterCIDR,
      ),
    );
    return;
  }
  const parsed = cidrs.map((c) => parseCIDRLegacy(c));
  for (let i = 0; i < cidrs.length; i++) {
    if (parsed[i] === null) {
      errs.push(
        fieldError(
          "clusterCIDR",
          "must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)",
          cidrs[i],
        ),
      );
      return;
    }
  }
  if (parsed.length === 2 && parsed[0]!.family === parsed[1]!.family) {
    errs.push(
      fieldError(
        "clusterCIDR",
        "must be a either a single CIDR or dual-stack pair of CIDRs (e.g. 10.100.0.0/16,fde4:8dba:82e1::/48)",
        clusterCIDR,
      ),
    );
  }
}

/**
 * Validates a defaulted configuration. Returns every problem found, in a stable order (the mode first,
 * then roughly the order of the v1alpha1 type); an empty list means valid.
 */
export function validateConfig(c: KubeProxyConfiguration): FieldError[] {
  const errs: FieldError[] = [];

  if (!SUPPORTED_PROXY_MODES.includes(c.mode)) {
    errs.push(
      fieldError("mode", `edgeproxy implements only the ${SUPPORTED_PROXY_MODES_TEXT} modes`, c.mode),
    );
  }
  errs.push(...validateFeatureGates(c.featureGates));

  // clientConnection
  if (c.clientConnection.qps < 0) {
    errs.push(
      fieldError("clientConnection.qps", "must be greater than or equal to 0", c.clientConnection.qps),
    );
  }
  if (c.clientConnection.burst < 0) {
    errs.push(
      fieldError("clientConnection.burst", "must be greater than or equal to 0", c.clientConnection.burst),
    );
  }

  // logging (component-base logsapi.Validate)
  const lg = c.logging;
  if (!LOG_FORMATS.includes(lg.format)) {
    errs.push(fieldError("logging.format", "Unsupported log format; must be text or json", lg.format));
  }
  if (lg.verbosity > MAX_INT32) {
    errs.push(fieldError("logging.verbosity", `must be <= ${MAX_INT32}`, lg.verbosity));
  }
  (lg.vmodule ?? []).forEach((item, i) => {
    const p = `logging.vmodule[${i}]`;
    if (lg.format !== "text") errs.push(fieldError("logging.vmodule", "only supported for text log format"));
    if (item.filePattern === "") errs.push(fieldError(`${p}.filePattern`, "file pattern must not be empty"));
    if (/[=,]/.test(item.filePattern)) {
      errs.push(
        fieldError(`${p}.filePattern`, "file pattern must not contain equal sign or comma", item.filePattern),
      );
    }
    if (item.verbosity > MAX_INT32) {
      errs.push(fieldError(`${p}.verbosity`, `must be <= ${MAX_INT32}`, item.verbosity));
    }
  });
  const alpha = featureEnabled(c.featureGates, "LoggingAlphaOptions");
  for (const fmt of ["json", "text"] as const) {
    const o = lg.options[fmt];
    if (o.splitStream && !alpha) {
      errs.push(
        fieldError(`logging.options.${fmt}.splitStream`, "feature LoggingAlphaOptions is disabled", true),
      );
    }
    if (!isZeroQuantity(o.infoBufferSize) && !alpha) {
      errs.push(
        fieldError(
          `logging.options.${fmt}.infoBufferSize`,
          "feature LoggingAlphaOptions is disabled",
          o.infoBufferSize,
        ),
      );
    }
  }

  // addresses
  if (parseIPLegacy(c.bindAddress) === null) {
    errs.push(
      fieldError("bindAddress", "not a valid textual representation of an IP address", c.bindAddress),
    );
  }
  for (const key of ["healthzBindAddress", "metricsBindAddress"] as const) {
    if (c[key] === "") continue; // disabled
    const p = hostPortProblem(c[key]);
    if (p !== null) errs.push(fieldError(key, p.problem, p.value));
  }
  if (c.showHiddenMetricsForVersion !== "" && !/^[0-9]+\.[0-9]+$/.test(c.showHiddenMetricsForVersion)) {
    errs.push(
      fieldError(
        "showHiddenMetricsForVersion",
        "must be omitted or have the form <major>.<minor>, e.g. 1.30",
        c.showHiddenMetricsForVersion,
      ),
    );
  }

  // iptables (the proxier's sync periods)
  const ipt = c.iptables;
  if (ipt.masqueradeBit < 0 || ipt.masqueradeBit > 31) {
    errs.push(fieldError("iptables.masqueradeBit", "must be within the range [0, 31]", ipt.masqueradeBit));
  }
  validateSyncPeriods(errs, "iptables", ipt);

  if (c.mode === "ipvs") errs.push(...validateIpvsConfig(c));

  // local traffic detection (upstream defaults an empty mode to ClusterCIDR before validating)
  if (!DETECT_LOCAL_MODES.includes(c.detectLocalMode)) {
    errs.push(
      fieldError(
        "detectLocalMode",
        `Unsupported value; supported values: ${DETECT_LOCAL_MODES.map((m) => JSON.stringify(m)).join(", ")}`,
        c.detectLocalMode,
      ),
    );
  }
  if (c.detectLocalMode === "BridgeInterface" && c.detectLocal.bridgeInterface === "") {
    errs.push(
      fieldError("detectLocal.bridgeInterface", "must not be empty when detectLocalMode is BridgeInterface"),
    );
  }
  if (c.detectLocalMode === "InterfaceNamePrefix" && c.detectLocal.interfaceNamePrefix === "") {
    errs.push(
      fieldError(
        "detectLocal.interfaceNamePrefix",
        "must not be empty when detectLocalMode is InterfaceNamePrefix",
      ),
    );
  }
  if ((c.detectLocalMode === "" || c.detectLocalMode === "ClusterCIDR") && c.clusterCIDR !== "") {
    validateClusterCIDR(errs, c.clusterCIDR);
  }

  // nodePortAddresses: CIDRs, or the single keyword "primary"
  const npa = c.nodePortAddresses ?? [];
  for (let i = 0; i < npa.length; i++) {
    if (npa[i] === NODE_PORT_ADDRESSES_PRIMARY) {
      if (i !== 0 || npa.length !== 1) {
        errs.push(fieldError(`nodePortAddresses[${i}]`, "can't use both 'primary' and CIDRs", npa[i]));
      }
      break;
    }
    if (parseCIDRLegacy(npa[i]) === null) {
      errs.push(fieldError(`nodePortAddresses[${i}]`, "must be a valid CIDR", npa[i]));
    }
  }

  // process
  if (c.oomScoreAdj < -1000 || c.oomScoreAdj > 1000) {
    errs.push(fieldError("oomScoreAdj", "must be within the range [-1000, 1000]", c.oomScoreAdj));
  }

  // conntrack
  const ct = c.conntrack;
  if (ct.maxPerCore < 0) {
    errs.push(fieldError("conntrack.maxPerCore", "must be greater than or equal to 0", ct.maxPerCore));
  }
  if (ct.min < 0) errs.push(fieldError("conntrack.min", "must be greater than or equal to 0", ct.min));
  nonNegativeDuration(errs, "conntrack.tcpEstablishedTimeout", ct.tcpEstablishedTimeout);
  nonNegativeDuration(errs, "conntrack.tcpCloseWaitTimeout", ct.tcpCloseWaitTimeout);
  nonNegativeDuration(errs, "conntrack.udpTimeout", ct.udpTimeout);
  nonNegativeDuration(errs, "conntrack.udpStreamTimeout", ct.udpStreamTimeout);

  if (c.configSyncPeriod <= 0) {
    errs.push(fieldError("configSyncPeriod", "must be greater than 0", formatDuration(c.configSyncPeriod)));
  }

  const pr = portRangeProblem(c.portRange);
  if (pr !== null) errs.push(fieldError("portRange", pr, c.portRange));

  return errs;
}

/**
 * Non-fatal observations that upstream does not reject either: an explicit `detectLocalMode: ClusterCIDR`
 * without `clusterCIDR` passes upstream validation, and kube-proxy then treats no traffic as local.
 */
export function configWarnings(c: KubeProxyConfiguration): string[] {
  const out: string[] = featureGateWarnings(c.featureGates);
  if (c.detectLocalMode === "ClusterCIDR" && c.clusterCIDR === "") {
    out.push(
      "detectLocalMode is ClusterCIDR but clusterCIDR is empty: no traffic will be treated as local " +
        "(set clusterCIDR or --cluster-cidr)",
    );
  }
  return out;
}
