import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { defaultConfig } from "../../../lib/config/defaults.ts";
import { validateConfig } from "../../../lib/config/validate.ts";
import { IPVS_SCHEDULERS, validateIpvsConfig } from "../../../lib/config/validate_ipvs.ts";
import type { KubeProxyConfiguration } from "../../../lib/config/types.ts";

function withIpvs(mode: string, ipvs: Partial<KubeProxyConfiguration["ipvs"]>): KubeProxyConfiguration {
  const c = defaultConfig();
  return { ...c, mode, ipvs: { ...c.ipvs, ...ipvs } };
}

const lines = (c: KubeProxyConfiguration) =>
  validateConfig(c).map((e) => `${e.path}: ${e.problem} (got ${e.got})`);

describe("mode ipvs", () => {
  it("is accepted with the defaults (scheduler blank = rr)", () => {
    assert.deepEqual(validateConfig(withIpvs("ipvs", {})), []);
    for (const s of IPVS_SCHEDULERS) assert.deepEqual(validateConfig(withIpvs("ipvs", { scheduler: s })), []);
  });

  it("checks the ipvs section like upstream's validateKubeProxyIPVSConfiguration", () => {
    assert.deepEqual(
      lines(withIpvs("ipvs", {
        syncPeriod: 1000,
        minSyncPeriod: 2000,
        tcpTimeout: -1000,
        udpTimeout: -1000,
        scheduler: "fancy",
        excludeCIDRs: ["10.0.0.0/8", "10.0.0.1"],
      })),
      [
        'ipvs.syncPeriod: must be greater than or equal to ipvs.minSyncPeriod (2s) (got "1s")',
        'ipvs.tcpTimeout: must be greater than or equal to 0 (got "-1s")',
        'ipvs.udpTimeout: must be greater than or equal to 0 (got "-1s")',
        'ipvs.scheduler: must be one of rr|wrr|lc|wlc|lblc|lblcr|sh|dh|sed|nq, or blank for the default (rr) (got "fancy")',
        'ipvs.excludeCIDRs[1]: must be a valid IP block (got "10.0.0.1")',
      ],
    );
    assert.deepEqual(validateIpvsConfig(withIpvs("ipvs", { syncPeriod: 0 })).map((e) => e.path), [
      "ipvs.syncPeriod",
    ]);
    assert.deepEqual(validateIpvsConfig(withIpvs("ipvs", { minSyncPeriod: -1 })).map((e) => e.path), [
      "ipvs.minSyncPeriod",
    ]);
  });

  it("leaves the ipvs section alone in the other modes, as upstream does", () => {
    assert.deepEqual(validateConfig(withIpvs("iptables", { scheduler: "fancy", syncPeriod: 0 })), []);
  });

  it("still refuses modes edgeproxy does not implement", () => {
    assert.deepEqual(lines(withIpvs("kernelspace", {})), [
      'mode: edgeproxy implements only the iptables|nftables|userspace|ipvs modes (got "kernelspace")',
    ]);
  });
});
