import { test } from "node:test";
import assert from "node:assert/strict";
import {
  base32Encode,
  endpointHash,
  endpointHashes,
  isServiceChainName,
  portProtoHash,
  serviceExternalChain,
  serviceFirewallChain,
  servicePortChains,
  servicePortEndpointChain,
  servicePortPolicyClusterChain,
  servicePortPolicyLocalChain,
} from "../../../../lib/proxy/iptables/chain_names.ts";

const enc = (s: string) => new TextEncoder().encode(s);

test("base32Encode matches the RFC 4648 test vectors", () => {
  const vectors: Array<[string, string]> = [
    ["", ""],
    ["f", "MY======"],
    ["fo", "MZXQ===="],
    ["foo", "MZXW6==="],
    ["foob", "MZXW6YQ="],
    ["fooba", "MZXW6YTB"],
    ["foobar", "MZXW6YTBOI======"],
  ];
  for (const [input, want] of vectors) assert.equal(base32Encode(enc(input)), want, JSON.stringify(input));
});

test("the 12 hashes of upstream's tests (research §1.5)", () => {
  const svc: Array<[string, string]> = [
    ["ns1/svc1:p80", "XPGD46QRK7WJZT7O"],
    ["ns2/svc2:p80", "GNZBNJ2PO5MGZ6GT"],
    ["ns3/svc3:p80", "X27LE4BHSL4DOUIK"],
    ["ns4/svc4:p80", "4SW47YFZTEDKD3PK"],
    ["ns5/svc5:p80", "NUKIZ6OKUXPJNT4C"],
    ["ns2/svc2:p8080", "2VJB64SDSIJUP5T6"],
  ];
  for (const [spn, hash] of svc) {
    assert.equal(portProtoHash(spn, "tcp"), hash);
    assert.equal(servicePortPolicyClusterChain(spn, "tcp"), `KUBE-SVC-${hash}`);
    assert.equal(servicePortPolicyLocalChain(spn, "tcp"), `KUBE-SVL-${hash}`);
    assert.equal(serviceExternalChain(spn, "tcp"), `KUBE-EXT-${hash}`);
    assert.equal(serviceFirewallChain(spn, "tcp"), `KUBE-FW-${hash}`);
    assert.deepEqual(servicePortChains(spn, "tcp"), {
      clusterPolicy: `KUBE-SVC-${hash}`,
      localPolicy: `KUBE-SVL-${hash}`,
      external: `KUBE-EXT-${hash}`,
      firewall: `KUBE-FW-${hash}`,
    });
  }
  const sep: Array<[string, string, string]> = [
    ["ns1/svc1:p80", "10.180.0.1:80", "SXIVWICOYRO3J4NJ"],
    ["ns5/svc5:p80", "10.180.0.3:80", "I77PXRDZVX7PMWMN"],
    ["ns4/svc4:p80", "10.180.0.4:80", "UKSFD7AGPMPPLUHC"],
    ["ns4/svc4:p80", "10.180.0.5:80", "C6EBXVWJJZMIWKLZ"],
    ["ns3/svc3:p80", "10.180.0.3:80", "OYPFS5VJICHGATKP"],
    ["ns2/svc2:p80", "10.180.0.2:80", "RS4RBKLTHTF2IUXJ"],
  ];
  for (const [spn, ep, hash] of sep) {
    assert.equal(servicePortEndpointChain(spn, "tcp", ep), `KUBE-SEP-${hash}`);
  }
});

test("protocol and bracketed IPv6 endpoints enter the hash (values from Python's hashlib/base64)", () => {
  assert.equal(
    servicePortEndpointChain("ns1/svc1:p80", "tcp", "[fd00:10:180::1]:80"),
    "KUBE-SEP-OGYCNMB4EMRUSJ6N",
  );
  assert.equal(servicePortPolicyClusterChain("ns1/svc1", "udp"), "KUBE-SVC-A2PEVXD55OHK2IVW");
  assert.equal(servicePortPolicyClusterChain("default/kubernetes:https", "tcp"), "KUBE-SVC-NPX46M4PTMTKRN6Y");
  assert.equal(servicePortEndpointChain("ns1/svc1:p80", "sctp", "10.0.0.1:53"), "KUBE-SEP-SMBTODN4GTQXTP5M");
  // Cached values stay the same.
  assert.equal(servicePortPolicyClusterChain("ns1/svc1", "udp"), "KUBE-SVC-A2PEVXD55OHK2IVW");
  assert.notEqual(portProtoHash("ns1/svc1", "udp"), portProtoHash("ns1/svc1", "tcp"));
});

test("endpointHashes is endpointHash of each endpoint, side by side, whatever the input's length", () => {
  const eps = ["10.0.0.1:80", "[fd00:10:180::1]:80", "10.0.0.2:8080"].map((endpoint) => ({ endpoint }));
  for (const spn of ["ns1/svc1:p80", "n".repeat(70) + "/s:p", "ns/ünïcode:p"]) {
    assert.equal(
      endpointHashes(spn, "tcp", eps),
      eps.map((e) => endpointHash(spn, "tcp", e.endpoint)).join(""),
    );
  }
  assert.equal(endpointHashes("ns1/svc1:p80", "tcp", []), "");
  // More endpoints than the scratch buffer first holds.
  const many = Array.from({ length: 200 }, (_, i) => ({ endpoint: `10.1.${i >> 8}.${i & 255}:80` }));
  assert.equal(
    endpointHashes("ns/a:b", "udp", many),
    many.map((e) => endpointHash("ns/a:b", "udp", e.endpoint)).join(""),
  );
  assert.equal(
    endpointHashes("ns1/svc1:p80", "tcp", [{ endpoint: "[fd00:10:180::1]:80" }]),
    "OGYCNMB4EMRUSJ6N",
  );
});

test("chain names fit iptables' 28-character limit", () => {
  assert.ok(
    servicePortEndpointChain("a-very-long-namespace-name/a-very-long-service:port", "sctp", "[fd00::1]:65535")
      .length <= 28,
  );
  assert.ok(serviceExternalChain("ns/n", "tcp").length <= 28);
});

test("isServiceChainName accepts the per-service prefixes only", () => {
  for (const c of ["KUBE-SVC-X", "KUBE-SVL-X", "KUBE-EXT-X", "KUBE-FW-X", "KUBE-SEP-X"]) {
    assert.ok(isServiceChainName(c), c);
  }
  for (
    const c of ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-MARK-MASQ", "KUBE-XLB-X", "KUBE-FORWARD", "DOCKER"]
  ) {
    assert.ok(!isServiceChainName(c), c);
  }
});
