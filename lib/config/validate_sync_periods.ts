/** Sync-period validation shared by the proxier sections of the configuration. */
import { formatDuration } from "./duration.ts";
import { type FieldError, fieldError } from "./field_error.ts";

/**
 * A proxier section's sync periods, as upstream validates the iptables and ipvs sections alike: syncPeriod
 * > 0, minSyncPeriod >= 0 and not above syncPeriod. `section` names the fields ("iptables", "ipvs").
 */
export function validateSyncPeriods(
  errs: FieldError[],
  section: string,
  p: { readonly syncPeriod: number; readonly minSyncPeriod: number },
): void {
  if (p.syncPeriod <= 0) {
    errs.push(fieldError(`${section}.syncPeriod`, "must be greater than 0", formatDuration(p.syncPeriod)));
  }
  if (p.minSyncPeriod < 0) {
    errs.push(
      fieldError(
        `${section}.minSyncPeriod`,
        "must be greater than or equal to 0",
        formatDuration(p.minSyncPeriod),
      ),
    );
  }
  if (p.syncPeriod > 0 && p.minSyncPeriod > p.syncPeriod) {
    errs.push(
      fieldError(
        `${section}.syncPeriod`,
        `must be greater than or equal to ${section}.minSyncPeriod (${formatDuration(p.minSyncPeriod)})`,
        formatDuration(p.syncPeriod),
      ),
    );
  }
}
