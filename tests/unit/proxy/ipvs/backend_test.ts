/**
 * The IPVS Provider (lib/proxy/ipvs/backend.ts) with a fake host: a full sync reads the kernel back and
 * writes everything missing; a partial sync reads nothing back and writes only the changed service's
 * real servers (the change path does not rewrite unchanged services); a removed TCP endpoint drains at
 * weight 0; checkDrift reports what is missing.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import { DriftFoundError, type ProxyState } from "../../../../lib/proxy/provider.ts";
import { type EndpointInfo, type ServicePortInfo, servicePortKey } from "../../../../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort } from "../../../support/tracer.ts";
import { fakeIpvsBackend as fake } from "../../../support/ipvs_fake_host.ts";

function state(svcs: [ServicePortInfo, EndpointInfo[]][]): ProxyState {
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  for (const [s, eps] of svcs) {
    services.set(servicePortKey(s.name), s);
    if (eps.length) endpoints.set(servicePortKey(s.name), eps);
  }
  return {
    family: "IPv4",
    services,
    endpoints,
    changedServices: new Set(),
    nodeLabels: {},
    localDetection: detectLocalByCIDR("10.0.0.0/8"),
  };
}

const a = makeServicePort("ns", "a", { clusterIP: "10.96.0.1" });
const b = makeServicePort("ns", "b", { clusterIP: "10.96.0.2" });
const ep = (ip: string) => makeEndpoint(ip, 80);

describe("IPVS Provider", () => {
  it("full reads back and writes all; partial reads nothing and touches only the changed service", async () => {
    const f = fake();
    await f.backend.sync(state([[a, [ep("10.1.0.1")]], [b, [ep("10.1.0.2")]]]), { full: true });
    assert.deepEqual(f.calls, ["ensureDummy", "ipsetSave", "dummyAddresses", "ipvsSave"]);
    assert.deepEqual(f.ipvsLines, [[
      "-A -t 10.96.0.1:80 -s rr",
      "-a -t 10.96.0.1:80 -r 10.1.0.1:80 -m -w 1",
      "-A -t 10.96.0.2:80 -s rr",
      "-a -t 10.96.0.2:80 -r 10.1.0.2:80 -m -w 1",
    ]]);
    f.calls.length = 0;
    f.ipvsLines.length = 0;
    await f.backend.sync(state([[a, [ep("10.1.0.1"), ep("10.1.0.3")]], [b, [ep("10.1.0.2")]]]), {
      full: false,
    });
    assert.deepEqual(f.calls, []);
    assert.deepEqual(f.ipvsLines, [["-a -t 10.96.0.1:80 -r 10.1.0.3:80 -m -w 1"]]);
  });

  it("a removed TCP endpoint gets weight 0 (graceful termination) instead of being deleted", async () => {
    const f = fake();
    await f.backend.sync(state([[a, [ep("10.1.0.1"), ep("10.1.0.3")]]]), { full: true });
    f.ipvsLines.length = 0;
    await f.backend.sync(state([[a, [ep("10.1.0.1")]]]), { full: false });
    // ipvsList answers "" (the real server is gone from the listing): nothing left to delete.
    assert.deepEqual(f.ipvsLines, [["-e -t 10.96.0.1:80 -r 10.1.0.3:80 -m -w 0"]]);
    assert.deepEqual(f.backend.terminating, []);
  });

  it("checkDrift reports a virtual server missing from the kernel; null when it matches", async () => {
    const f = fake();
    await f.backend.sync(state([[a, [ep("10.1.0.1")]]]), { full: true });
    assert.match((await f.backend.checkDrift())!, /10\.96\.0\.1:80\/TCP is missing/);
    f.setKernel("-A -t 10.96.0.1:80 -s rr\n-a -t 10.96.0.1:80 -r 10.1.0.1:80 -m -w 1\n");
    assert.match((await f.backend.checkDrift())!, /10\.96\.0\.1 is missing from kube-ipvs0/);
  });

  it("a draining real server's virtual server deleted during the drift check is drift, not a failed check", async () => {
    const f = fake();
    await f.backend.sync(state([[a, [ep("10.1.0.1"), ep("10.1.0.3")]]]), { full: true });
    // the removed endpoint still has a connection: it stays terminating at weight 0
    f.setList(() =>
      Promise.resolve("TCP  10.96.0.1:80 rr\n  -> 10.1.0.1:80  Masq 1 0 0\n  -> 10.1.0.3:80  Masq 0 1 0\n")
    );
    await f.backend.sync(state([[a, [ep("10.1.0.1")]]]), { full: false });
    assert.equal(f.backend.terminating.length, 1);
    f.setKernel(
      "-A -t 10.96.0.1:80 -s rr\n-a -t 10.96.0.1:80 -r 10.1.0.1:80 -m -w 1\n-a -t 10.96.0.1:80 -r 10.1.0.3:80 -m -w 0\n",
    );
    f.setDummy(["10.96.0.1"]);
    assert.equal(await f.backend.checkDrift(), null, "all there: no drift");
    // deleted after the check read the kernel, before it lists the draining real server's virtual server
    f.setList((v) => Promise.reject(new Error(`/usr/sbin/ipvsadm -Ln ${v}: No such service`)));
    assert.equal(
      await f.backend.checkDrift(),
      "IPVS virtual server -t 10.96.0.1:80 (draining real servers) is missing",
    );
    // any other listing error is still an error
    f.setList(() => Promise.reject(new Error("ipvsadm: Permission denied")));
    await assert.rejects(f.backend.checkDrift(), /Permission denied/);
    // and a sync that finds it gone reports drift (the loop runs a full sync at once)
    f.setList((v) => Promise.reject(new Error(`/usr/sbin/ipvsadm -Ln ${v}: No such service`)));
    await assert.rejects(
      f.backend.sync(state([[a, [ep("10.1.0.1")]]]), { full: false }),
      (e: Error) => {
        assert.ok(e instanceof DriftFoundError, String(e));
        assert.equal(e.message, "IPVS virtual server -t 10.96.0.1:80 (draining real servers) is missing");
        return true;
      },
    );
  });
});
