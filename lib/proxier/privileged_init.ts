/**
 * Privileged initialisation done once at start (upstream server_linux.go platformSetup and --init-only):
 * conntrack sysctls, the OOM score, route_localnet for localhost NodePorts, and the bridge-nf check.
 * Every step degrades to a warning: a read-only /proc/sys (a container, a test) never stops the agent.
 */
import type { KubeProxyConfiguration } from "../config/types.ts";
import { ProcSysctl } from "../conntrack/sysctl.ts";
import {
  applyConntrackSettings,
  applyOOMScoreAdj,
  checkBridgeNfCallIptables,
  ensureRouteLocalnet,
  type SetupReport,
} from "../conntrack/setup.ts";

/** Applies the privileged settings; reports each change with `info` and each problem with `warn`. */
export async function privilegedInit(
  config: KubeProxyConfiguration,
  info: (m: string) => void,
  warn: (m: string) => void,
): Promise<void> {
  const sysctl = new ProcSysctl();
  const reports: SetupReport[] = [
    await applyOOMScoreAdj(config.oomScoreAdj),
    await applyConntrackSettings(config.conntrack, { sysctl }),
  ];
  if (config.iptables.localhostNodePorts) reports.push(await ensureRouteLocalnet(sysctl));
  reports.push(await checkBridgeNfCallIptables(sysctl));
  for (const r of reports) {
    for (const c of r.changed) info(c);
    for (const w of r.warnings) warn(w);
  }
}
