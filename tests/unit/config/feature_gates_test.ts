import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { resolveInvocation, type ResolveIO } from "../../../lib/cli/resolve.ts";
import { ConfigError } from "../../../lib/config/load.ts";
import {
  featureEnabled,
  KNOWN_FEATURE_GATES,
  validateFeatureGates,
} from "../../../lib/config/feature_gates.ts";

const HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

function files(map: Record<string, string>): ResolveIO {
  return { readConfig: (f) => Promise.resolve(map[f]) };
}

async function errorOf(argv: string[], io?: ResolveIO): Promise<string> {
  try {
    await resolveInvocation(argv, io);
  } catch (e) {
    return (e as Error).message;
  }
  assert.fail(`expected ${JSON.stringify(argv)} to be rejected`);
}

describe("--feature-gates / featureGates are checked like upstream's registry (v1.34)", () => {
  it("an unknown gate is an error naming it, on the flag and in a --config file", async () => {
    assert.equal(
      await errorOf(["--feature-gates=PreferSameTrafficDistribution=true,Bogus=true"]),
      'invalid argument "PreferSameTrafficDistribution=true,Bogus=true" for "--feature-gates" flag: ' +
        "unrecognized feature gate: Bogus",
    );
    assert.equal(
      await errorOf(["--config", "kp.yaml"], files({ "kp.yaml": HEAD + "featureGates:\n  Bogus: true\n" })),
      "invalid config kp.yaml: featureGates: unrecognized feature gate: Bogus",
    );
    await assert.rejects(
      resolveInvocation(
        ["--config", "kp.yaml"],
        files({ "kp.yaml": HEAD + "featureGates: {Bogus: true}\n" }),
      ),
      ConfigError,
    );
  });

  it("a gate locked at v1.34 refuses the other value: LoadBalancerIPMode=false", async () => {
    assert.equal(
      await errorOf(["--feature-gates", "LoadBalancerIPMode=false"]),
      'invalid argument "LoadBalancerIPMode=false" for "--feature-gates" flag: ' +
        "cannot set feature gate LoadBalancerIPMode to false, feature is locked to true",
    );
    for (const g of ["TopologyAwareHints", "ServiceTrafficDistribution", "NFTablesProxyMode"]) {
      assert.match(await errorOf([`--feature-gates=${g}=false`]), /feature is locked to true$/, g);
    }
  });

  it("the locked value is accepted with upstream's warning; gates of other components are accepted", async () => {
    const inv = await resolveInvocation([
      "--feature-gates=LoadBalancerIPMode=true,KubeletPSI=false,InOrderInformers=true,AllAlpha=false",
    ]);
    assert.equal(inv.action, "run");
    assert.deepEqual(inv.warnings, [
      "Setting GA feature gate LoadBalancerIPMode=true. It will be removed in a future release.",
    ]);
  });

  it("validateFeatureGates reports the first problem in name order", () => {
    assert.deepEqual(validateFeatureGates({}), []);
    assert.deepEqual(validateFeatureGates({ Zzz: true, Aaa: true }), [
      { path: "featureGates", problem: "unrecognized feature gate: Aaa" },
    ]);
    assert.deepEqual(validateFeatureGates({ loadbalanceripmode: true }), [
      { path: "featureGates", problem: "unrecognized feature gate: loadbalanceripmode" },
    ], "names are case-sensitive");
    assert.deepEqual(validateFeatureGates({ toString: true }), [
      { path: "featureGates", problem: "unrecognized feature gate: toString" },
    ]);
  });

  it("featureEnabled: explicit value, then AllAlpha/AllBeta for alpha/beta gates, then the v1.34 default", () => {
    assert.equal(featureEnabled({}, "PreferSameTrafficDistribution"), true);
    assert.equal(
      featureEnabled({ PreferSameTrafficDistribution: false }, "PreferSameTrafficDistribution"),
      false,
    );
    assert.equal(featureEnabled({ AllBeta: false }, "PreferSameTrafficDistribution"), false);
    assert.equal(featureEnabled({ AllAlpha: true }, "LoggingAlphaOptions"), true);
    assert.equal(featureEnabled({ AllBeta: false }, "LoadBalancerIPMode"), true, "GA gates ignore AllBeta");
    assert.equal(featureEnabled({}, "NoSuchGate"), false);
  });

  it("the table holds the gates kube-proxy's own code consults, with their v1.34 state", () => {
    const s = (n: string) => KNOWN_FEATURE_GATES[n];
    assert.deepEqual(s("LoadBalancerIPMode"), { default: true, preRelease: "GA", lockToDefault: true });
    assert.deepEqual(s("PreferSameTrafficDistribution"), {
      default: true,
      preRelease: "BETA",
      lockToDefault: false,
    });
    assert.deepEqual(s("MultiCIDRServiceAllocator"), {
      default: true,
      preRelease: "GA",
      lockToDefault: true,
    });
    assert.equal(s("KubeProxyDrainingTerminatingNodes"), undefined, "removed before v1.34");
  });
});
