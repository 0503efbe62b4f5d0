/**
 * Port of upstream TestUpdateEndpointsMap (pkg/proxy/iptables/proxier_test.go, the version that checks
 * DeletedUDPEndpoints and NewlyActiveUDPServices): a previous set of EndpointSlices is applied, then each
 * slice is added, updated or deleted, and the resulting map, stale UDP endpoints, newly active UDP
 * service ports and local ready endpoint counts are checked.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Endpoint, EndpointPort, EndpointSlice } from "../../../lib/k8s/objects.ts";
import { EndpointsChangeTracker, EndpointsMap } from "../../../lib/proxy/endpoints_change_tracker.ts";

const testHostname = "test-hostname";

function makeTestEndpointSlice(
  ns: string,
  name: string,
  sliceNum: number,
  fn: (eps: EndpointSlice) => void,
): EndpointSlice {
  const eps: EndpointSlice = {
    metadata: {
      name: `${name}-${sliceNum}`,
      namespace: ns,
      annotations: {},
      labels: { "kubernetes.io/service-name": name },
    },
    addressType: "IPv4",
  };
  fn(eps);
  return eps;
}

const udp = (name: string, port: number): EndpointPort => ({ name, port, protocol: "UDP" });
const ep = (ip: string, local = false): Endpoint => ({
  addresses: [ip],
  ...(local ? { nodeName: testHostname } : {}),
});
const subset = (endpoints: Endpoint[], ports: EndpointPort[]) => (eps: EndpointSlice) => {
  eps.addressType = "IPv4";
  eps.endpoints = endpoints;
  eps.ports = ports;
};
/** servicePortKey of a UDP port. */
const spn = (ns: string, name: string, port: string) => `${ns}/${name}:${port}/UDP`;

const emptyEndpointSlices = [makeTestEndpointSlice("ns1", "ep1", 1, () => {})];
const subset1 = subset([ep("10.1.1.1")], [udp("p11", 11)]);
const subset2 = subset([ep("10.1.1.2")], [udp("p12", 12)]);
const namedPortLocal = [
  makeTestEndpointSlice("ns1", "ep1", 1, subset([ep("10.1.1.1", true)], [udp("p11", 11)])),
];
const namedPort = [makeTestEndpointSlice("ns1", "ep1", 1, subset1)];
const namedPortRenamed = [
  makeTestEndpointSlice("ns1", "ep1", 1, subset([ep("10.1.1.1")], [udp("p11-2", 11)])),
];
const namedPortRenumbered = [
  makeTestEndpointSlice("ns1", "ep1", 1, subset([ep("10.1.1.1")], [udp("p11", 22)])),
];
const namedPortsLocalNoLocal = [
  makeTestEndpointSlice(
    "ns1",
    "ep1",
    1,
    subset([ep("10.1.1.1"), ep("10.1.1.2", true)], [udp("p11", 11), udp("p12", 12)]),
  ),
];
const multipleSubsets = [
  makeTestEndpointSlice("ns1", "ep1", 1, subset1),
  makeTestEndpointSlice("ns1", "ep1", 2, subset2),
];
const subsetLocal = subset([ep("10.1.1.2", true)], [udp("p12", 12)]);
const multipleSubsetsWithLocal = [
  makeTestEndpointSlice("ns1", "ep1", 1, subset1),
  makeTestEndpointSlice("ns1", "ep1", 2, subsetLocal),
];
const subsetMultiplePortsLocal = subset([ep("10.1.1.1", true)], [udp("p11", 11), udp("p12", 12)]);
const subset3 = subset([ep("10.1.1.3")], [udp("p13", 13)]);
const multipleSubsetsMultiplePortsLocal = [
  makeTestEndpointSlice("ns1", "ep1", 1, subsetMultiplePortsLocal),
  makeTestEndpointSlice("ns1", "ep1", 2, subset3),
];
const subsetMultipleIPsPorts1 = subset([ep("10.1.1.1"), ep("10.1.1.2", true)], [
  udp("p11", 11),
  udp("p12", 12),
]);
const subsetMultipleIPsPorts2 = subset([ep("10.1.1.3"), ep("10.1.1.4", true)], [
  udp("p13", 13),
  udp("p14", 14),
]);
const subsetMultipleIPsPorts3 = subset([ep("10.2.2.1"), ep("10.2.2.2", true)], [
  udp("p21", 21),
  udp("p22", 22),
]);
const multipleSubsetsIPsPorts = [
  makeTestEndpointSlice("ns1", "ep1", 1, subsetMultipleIPsPorts1),
  makeTestEndpointSlice("ns1", "ep1", 2, subsetMultipleIPsPorts2),
  makeTestEndpointSlice("ns2", "ep2", 1, subsetMultipleIPsPorts3),
];
const complexSubset1 = subset([ep("10.2.2.2", true), ep("10.2.2.22", true)], [udp("p22", 22)]);
const complexSubset2 = subset([ep("10.2.2.3", true)], [udp("p23", 23)]);
const complexSubset3 = subset([ep("10.4.4.4", true), ep("10.4.4.5", true)], [udp("p44", 44)]);
const complexSubset4 = subset([ep("10.4.4.6", true)], [udp("p45", 45)]);
const complexSubset5 = subset([ep("10.1.1.1"), ep("10.1.1.11")], [udp("p11", 11)]);
const complexSubset6 = subset([ep("10.1.1.2")], [udp("p12", 12), udp("p122", 122)]);
const complexSubset7 = subset([ep("10.3.3.3")], [udp("p33", 33)]);
const complexSubset8 = subset([ep("10.4.4.4", true)], [udp("p44", 44)]);
const complexBefore = [
  makeTestEndpointSlice("ns1", "ep1", 1, subset1),
  null,
  makeTestEndpointSlice("ns2", "ep2", 1, complexSubset1),
  makeTestEndpointSlice("ns2", "ep2", 2, complexSubset2),
  null,
  makeTestEndpointSlice("ns4", "ep4", 1, complexSubset3),
  makeTestEndpointSlice("ns4", "ep4", 2, complexSubset4),
];
const complexAfter = [
  makeTestEndpointSlice("ns1", "ep1", 1, complexSubset5),
  makeTestEndpointSlice("ns1", "ep1", 2, complexSubset6),
  null,
  null,
  makeTestEndpointSlice("ns3", "ep3", 1, complexSubset7),
  makeTestEndpointSlice("ns4", "ep4", 1, complexSubset8),
  null,
];

/** Expected endpoints per servicePortKey: "ip:port", with " local" appended for local ones. */
type Expect = Record<string, string[]>;

interface TestCase {
  name: string;
  previousEndpoints: Array<EndpointSlice | null>;
  currentEndpoints: Array<EndpointSlice | null>;
  oldEndpoints: Expect;
  expectedResult: Expect;
  expectedDeletedUDPEndpoints: Array<[string, string]>;
  expectedNewlyActiveUDPServices: string[];
  expectedLocalEndpoints: Record<string, number>;
}

const testCases: TestCase[] = [{
  name: "nothing",
  previousEndpoints: [],
  currentEndpoints: [],
  oldEndpoints: {},
  expectedResult: {},
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: {},
}, {
  name: "no change, named port, local",
  previousEndpoints: namedPortLocal,
  currentEndpoints: namedPortLocal,
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11 local"] },
  expectedResult: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11 local"] },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: { "ns1/ep1": 1 },
}, {
  name: "no change, multiple subsets",
  previousEndpoints: multipleSubsets,
  currentEndpoints: multipleSubsets,
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"], [spn("ns1", "ep1", "p12")]: ["10.1.1.2:12"] },
  expectedResult: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.2:12"],
  },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: {},
}, {
  name: "no change, multiple subsets, multiple ports, local",
  previousEndpoints: multipleSubsetsMultiplePortsLocal,
  currentEndpoints: multipleSubsetsMultiplePortsLocal,
  oldEndpoints: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11 local"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.1:12 local"],
    [spn("ns1", "ep1", "p13")]: ["10.1.1.3:13"],
  },
  expectedResult: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11 local"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.1:12 local"],
    [spn("ns1", "ep1", "p13")]: ["10.1.1.3:13"],
  },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: { "ns1/ep1": 1 },
}, {
  name: "no change, multiple endpoints, subsets, IPs, and ports",
  previousEndpoints: multipleSubsetsIPsPorts,
  currentEndpoints: multipleSubsetsIPsPorts,
  oldEndpoints: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11", "10.1.1.2:11 local"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.1:12", "10.1.1.2:12 local"],
    [spn("ns1", "ep1", "p13")]: ["10.1.1.3:13", "10.1.1.4:13 local"],
    [spn("ns1", "ep1", "p14")]: ["10.1.1.3:14", "10.1.1.4:14 local"],
    [spn("ns2", "ep2", "p21")]: ["10.2.2.1:21", "10.2.2.2:21 local"],
    [spn("ns2", "ep2", "p22")]: ["10.2.2.1:22", "10.2.2.2:22 local"],
  },
  expectedResult: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11", "10.1.1.2:11 local"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.1:12", "10.1.1.2:12 local"],
    [spn("ns1", "ep1", "p13")]: ["10.1.1.3:13", "10.1.1.4:13 local"],
    [spn("ns1", "ep1", "p14")]: ["10.1.1.3:14", "10.1.1.4:14 local"],
    [spn("ns2", "ep2", "p21")]: ["10.2.2.1:21", "10.2.2.2:21 local"],
    [spn("ns2", "ep2", "p22")]: ["10.2.2.1:22", "10.2.2.2:22 local"],
  },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: { "ns1/ep1": 2, "ns2/ep2": 1 },
}, {
  name: "add an Endpoints",
  previousEndpoints: [null],
  currentEndpoints: namedPortLocal,
  oldEndpoints: {},
  expectedResult: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11 local"] },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [spn("ns1", "ep1", "p11")],
  expectedLocalEndpoints: { "ns1/ep1": 1 },
}, {
  name: "remove an Endpoints",
  previousEndpoints: namedPortLocal,
  currentEndpoints: [null],
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11 local"] },
  expectedResult: {},
  expectedDeletedUDPEndpoints: [["10.1.1.1:11", spn("ns1", "ep1", "p11")]],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: {},
}, {
  name: "add an IP and port",
  previousEndpoints: namedPort,
  currentEndpoints: namedPortsLocalNoLocal,
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedResult: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11", "10.1.1.2:11 local"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.1:12", "10.1.1.2:12 local"],
  },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [spn("ns1", "ep1", "p12")],
  expectedLocalEndpoints: { "ns1/ep1": 1 },
}, {
  name: "remove an IP and port",
  previousEndpoints: namedPortsLocalNoLocal,
  currentEndpoints: namedPort,
  oldEndpoints: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11", "10.1.1.2:11 local"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.1:12", "10.1.1.2:12 local"],
  },
  expectedResult: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedDeletedUDPEndpoints: [
    ["10.1.1.2:11", spn("ns1", "ep1", "p11")],
    ["10.1.1.1:12", spn("ns1", "ep1", "p12")],
    ["10.1.1.2:12", spn("ns1", "ep1", "p12")],
  ],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: {},
}, {
  name: "add a subset",
  previousEndpoints: [namedPort[0], null],
  currentEndpoints: multipleSubsetsWithLocal,
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedResult: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.2:12 local"],
  },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [spn("ns1", "ep1", "p12")],
  expectedLocalEndpoints: { "ns1/ep1": 1 },
}, {
  name: "remove a subset",
  previousEndpoints: multipleSubsets,
  currentEndpoints: [namedPort[0], null],
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"], [spn("ns1", "ep1", "p12")]: ["10.1.1.2:12"] },
  expectedResult: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedDeletedUDPEndpoints: [["10.1.1.2:12", spn("ns1", "ep1", "p12")]],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: {},
}, {
  name: "rename a port",
  previousEndpoints: namedPort,
  currentEndpoints: namedPortRenamed,
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedResult: { [spn("ns1", "ep1", "p11-2")]: ["10.1.1.1:11"] },
  expectedDeletedUDPEndpoints: [["10.1.1.1:11", spn("ns1", "ep1", "p11")]],
  expectedNewlyActiveUDPServices: [spn("ns1", "ep1", "p11-2")],
  expectedLocalEndpoints: {},
}, {
  name: "renumber a port",
  previousEndpoints: namedPort,
  currentEndpoints: namedPortRenumbered,
  oldEndpoints: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedResult: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:22"] },
  expectedDeletedUDPEndpoints: [["10.1.1.1:11", spn("ns1", "ep1", "p11")]],
  expectedNewlyActiveUDPServices: [],
  expectedLocalEndpoints: {},
}, {
  name: "complex add and remove",
  previousEndpoints: complexBefore,
  currentEndpoints: complexAfter,
  oldEndpoints: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"],
    [spn("ns2", "ep2", "p22")]: ["10.2.2.22:22 local", "10.2.2.2:22 local"],
    [spn("ns2", "ep2", "p23")]: ["10.2.2.3:23 local"],
    [spn("ns4", "ep4", "p44")]: ["10.4.4.4:44 local", "10.4.4.5:44 local"],
    [spn("ns4", "ep4", "p45")]: ["10.4.4.6:45 local"],
  },
  expectedResult: {
    [spn("ns1", "ep1", "p11")]: ["10.1.1.11:11", "10.1.1.1:11"],
    [spn("ns1", "ep1", "p12")]: ["10.1.1.2:12"],
    [spn("ns1", "ep1", "p122")]: ["10.1.1.2:122"],
    [spn("ns3", "ep3", "p33")]: ["10.3.3.3:33"],
    [spn("ns4", "ep4", "p44")]: ["10.4.4.4:44 local"],
  },
  expectedDeletedUDPEndpoints: [
    ["10.2.2.2:22", spn("ns2", "ep2", "p22")],
    ["10.2.2.22:22", spn("ns2", "ep2", "p22")],
    ["10.2.2.3:23", spn("ns2", "ep2", "p23")],
    ["10.4.4.5:44", spn("ns4", "ep4", "p44")],
    ["10.4.4.6:45", spn("ns4", "ep4", "p45")],
  ],
  expectedNewlyActiveUDPServices: [
    spn("ns1", "ep1", "p12"),
    spn("ns1", "ep1", "p122"),
    spn("ns3", "ep3", "p33"),
  ],
  expectedLocalEndpoints: { "ns4/ep4": 1 },
}, {
  name: "change from 0 endpoint address to 1 unnamed port",
  previousEndpoints: emptyEndpointSlices,
  currentEndpoints: namedPort,
  oldEndpoints: {},
  expectedResult: { [spn("ns1", "ep1", "p11")]: ["10.1.1.1:11"] },
  expectedDeletedUDPEndpoints: [],
  expectedNewlyActiveUDPServices: [spn("ns1", "ep1", "p11")],
  expectedLocalEndpoints: {},
}];

/** The map as Expect (keys sorted), keeping the endpoint order of the map. */
function summarise(em: EndpointsMap): Expect {
  const out: Expect = {};
  for (const key of [...em.keys()].sort()) {
    out[key] = em.get(key)!.map((e) => `${e.endpoint}${e.isLocal ? " local" : ""}`);
  }
  return out;
}

describe("EndpointsMap.apply (upstream TestUpdateEndpointsMap)", () => {
  testCases.forEach((tc, tci) => {
    it(`[${tci}] ${tc.name}`, () => {
      const warnings: string[] = [];
      const tracker = new EndpointsChangeTracker({
        nodeName: testHostname,
        ipFamily: "IPv4",
        warn: (m) => warnings.push(m),
      });
      const em = new EndpointsMap();
      // First check that after adding all previous versions of endpoints, the map is as expected.
      for (const prev of tc.previousEndpoints) if (prev !== null) tracker.endpointSliceUpdate(prev, false);
      em.apply(tracker);
      assert.deepEqual(summarise(em), tc.oldEndpoints);

      assert.equal(tc.previousEndpoints.length, tc.currentEndpoints.length);
      tc.previousEndpoints.forEach((prev, i) => {
        const curr = tc.currentEndpoints[i];
        if (prev === null) tracker.endpointSliceUpdate(curr!, false);
        else if (curr === null) tracker.endpointSliceUpdate(prev, true);
        else tracker.endpointSliceUpdate(curr, false);
      });
      const result = em.apply(tracker);
      assert.deepEqual(summarise(em), tc.expectedResult);
      assert.deepEqual(
        result.deletedUDPEndpoints.map((d) => [d.endpoint, d.servicePortKey]).sort(),
        [...tc.expectedDeletedUDPEndpoints].sort(),
      );
      for (const d of result.deletedUDPEndpoints) {
        assert.equal(d.endpoint, `${d.ip}:${d.endpoint.split(":")[1]}`);
      }
      assert.deepEqual(
        [...result.newlyActiveUDPServices].sort(),
        [...tc.expectedNewlyActiveUDPServices].sort(),
      );
      assert.deepEqual(Object.fromEntries(em.localReadyEndpoints()), tc.expectedLocalEndpoints);
      assert.deepEqual(warnings, []);
    });
  });
});
