/**
 * Switching proxy modes (upstream platformCleanup in cmd/kube-proxy/app/server_linux.go): a mode starting
 * on a host removes what the other modes left there (iptables mode's KUBE-* chains and jump rules when
 * nftables starts, nftables' `kube-proxy` tables when iptables starts), so packets never pass both; and
 * `--cleanup` removes what every mode left. Each mode's own `cleanup` does the work.
 */
import { PROXY_BACKENDS } from "./backends.ts";

type CleanupLog = { info(msg: string): void; warn(msg: string): void };

/**
 * Runs the cleanup of every mode except `mode` ("" is iptables). A failure is logged, never fatal: the
 * mode starting works regardless, and upstream only logs these too.
 */
export async function cleanupOtherModes(mode: string, log: CleanupLog): Promise<void> {
  const own = mode === "" ? "iptables" : mode;
  for (const [name, create] of Object.entries(PROXY_BACKENDS)) {
    if (name === own) continue;
    try {
      const code = await create().cleanup(log);
      if (code !== 0) log.warn(`leftovers of ${name} mode: cleanup exited ${code}`);
    } catch (e) {
      log.warn(`leftovers of ${name} mode: ${(e as Error).message}`);
    }
  }
}

/** `--cleanup`: the mode's own cleanup first, then every other mode's. Returns the worst exit code. */
export async function cleanupAllModes(mode: string, log: CleanupLog): Promise<number> {
  const own = mode === "" ? "iptables" : mode;
  let code = await PROXY_BACKENDS[own]().cleanup(log);
  for (const [name, create] of Object.entries(PROXY_BACKENDS)) {
    if (name === own) continue;
    try {
      code = Math.max(code, await create().cleanup(log));
    } catch (e) {
      log.warn(`cleanup of ${name} mode: ${(e as Error).message}`);
      code = 1;
    }
  }
  return code;
}
