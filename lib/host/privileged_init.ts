/**
 * Privileged initialisation done once at start (upstream server_linux.go platformSetup and --init-only):
 * conntrack sysctls, the OOM score, route_localnet for localhost NodePorts, and the bridge-nf check.
 * Every step degrades to a warning: a read-only /proc/sys (a container, a test) never stops the agent.
 */
import type { KubeProxyConfiguration } from "../config/types.ts";
import { ProcSysctl } from "./sysctl.ts";
import {
  applyConntrackSettings,
  applyOOMScoreAdj,
  checkBridgeNfCallIptables,
  ensureRouteLocalnet,
  type SetupReport,
} from "./conntrack_setup.ts";

/** Applies the privileged settings (each step logs its own changes and warnings); returns the reports. */
export async function privilegedInit(config: KubeProxyConfiguration): Promise<SetupReport[]> {
  const sysctl = new ProcSysctl();
  const reports: SetupReport[] = [
    await applyOOMScoreAdj(config.oomScoreAdj),
    await applyConntrackSettings(config.conntrack, { sysctl }),
  ];
  if (config.iptables.localhostNodePorts) reports.push(await ensureRouteLocalnet(sysctl));
  reports.push(await checkBridgeNfCallIptables(sysctl));
  return reports;
}
