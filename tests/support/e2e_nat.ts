/**
 * Reads the Service → endpoint wiring out of `iptables-save -t nat` as the kernel has it, so e2e tests can
 * compare it with what the apiserver holds.
 */

/**
 * clusterIP → sorted DNAT targets ("10.244.1.2:8080") from an `iptables-save -t nat` dump, following
 * KUBE-SERVICES → KUBE-SVC-* → KUBE-SEP-* → DNAT. Only ClusterIPs with a KUBE-SVC chain appear (a Service
 * without endpoints has none).
 */
export function natServiceTargets(natSave: string): Map<string, string[]> {
  const svcByIP = new Map<string, string>();
  const seps = new Map<string, string[]>();
  const dnat = new Map<string, string>();
  for (const line of natSave.split("\n")) {
    const w = line.split(" ");
    if (w[0] !== "-A") continue;
    const chain = w[1];
    const target = w[w.indexOf("-j") + 1];
    if (chain === "KUBE-SERVICES" && target?.startsWith("KUBE-SVC-")) {
      svcByIP.set(w[w.indexOf("-d") + 1].replace(/\/32$/, ""), target);
    } else if (chain.startsWith("KUBE-SVC-") && target?.startsWith("KUBE-SEP-")) {
      seps.set(chain, [...(seps.get(chain) ?? []), target]);
    } else if (chain.startsWith("KUBE-SEP-") && target === "DNAT") {
      dnat.set(chain, w[w.indexOf("--to-destination") + 1]);
    }
  }
  const out = new Map<string, string[]>();
  for (const [ip, svc] of svcByIP) {
    out.set(ip, [...new Set((seps.get(svc) ?? []).map((s) => dnat.get(s) ?? `?${s}`))].sort());
  }
  return out;
}
