/**
 * Validation of the `ipvs` section, applied only when `mode` is "ipvs" (upstream
 * validateKubeProxyIPVSConfiguration): sync periods, the scheduler, the IPVS timeouts and
 * `excludeCIDRs`, reported with v1alpha1 field paths.
 */
import { formatDuration } from "./duration.ts";
import { type FieldError, fieldError } from "./field_error.ts";
import { parseCIDRLegacy } from "../net/go_net.ts";
import type { KubeProxyConfiguration } from "./types.ts";
import { validateSyncPeriods } from "./validate_sync_periods.ts";

/** Schedulers upstream's validation accepts ("" is the default, rr). */
export const IPVS_SCHEDULERS: readonly string[] = [
  "rr",
  "wrr",
  "lc",
  "wlc",
  "lblc",
  "lblcr",
  "sh",
  "dh",
  "sed",
  "nq",
];

/** Every problem of `c.ipvs`, in upstream's order; empty when valid. */
export function validateIpvsConfig(c: Pick<KubeProxyConfiguration, "ipvs">): FieldError[] {
  const errs: FieldError[] = [];
  const ipvs = c.ipvs;
  validateSyncPeriods(errs, "ipvs", ipvs);
  for (
    const [field, value] of [
      ["tcpTimeout", ipvs.tcpTimeout],
      ["tcpFinTimeout", ipvs.tcpFinTimeout],
      ["udpTimeout", ipvs.udpTimeout],
    ] as const
  ) {
    if (value < 0) {
      errs.push(fieldError(`ipvs.${field}`, "must be greater than or equal to 0", formatDuration(value)));
    }
  }
  if (ipvs.scheduler !== "" && !IPVS_SCHEDULERS.includes(ipvs.scheduler)) {
    errs.push(
      fieldError(
        "ipvs.scheduler",
        `must be one of ${IPVS_SCHEDULERS.join("|")}, or blank for the default (rr)`,
        ipvs.scheduler,
      ),
    );
  }
  const exclude = ipvs.excludeCIDRs ?? [];
  for (let i = 0; i < exclude.length; i++) {
    if (parseCIDRLegacy(exclude[i]) === null) {
      errs.push(fieldError(`ipvs.excludeCIDRs[${i}]`, "must be a valid IP block", exclude[i]));
    }
  }
  return errs;
}
