/**
 * Chain names of the nftables backend: upstream's Test_servicePortChainNameBase and
 * Test_servicePortEndpointChainNameBase (pkg/proxy/nftables/proxier_test.go), transcribed.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Protocol, ServicePortName } from "../../../../lib/proxy/types.ts";
import {
  endpointChainNameBase,
  isAffinitySetName,
  isServiceChainName,
  servicePortChainNameBase,
} from "../../../../lib/proxy/nftables/render/names.ts";
import { makeEndpoint } from "../../../support/tracer.ts";

const LONG_NS = "very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx";
const LONG_SVC = "very-long-service-name-why-would-you-even-do-this-i-mean-really";
const LONG_PORT = "port-443-providing-the-hypertext-transmission-protocol-with-tls";

function spn(namespace: string, name: string, port: string, protocol: Protocol): ServicePortName {
  return { namespace, name, port, protocol };
}

test("Test_servicePortChainNameBase", () => {
  const cases: Array<[string, ServicePortName, string]> = [
    ["simple", spn("testing", "service", "http", "TCP"), "P4ZYZVCF-testing/service/tcp/http"],
    [
      "different port, different hash",
      spn("testing", "service", "https", "TCP"),
      "LZBRENCP-testing/service/tcp/https",
    ],
    [
      "max length",
      spn(LONG_NS, LONG_SVC, LONG_PORT, "SCTP"),
      `KR6NACJP-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}`,
    ],
  ];
  for (const [name, n, expected] of cases) assert.equal(servicePortChainNameBase(n), expected, name);
});

test("Test_servicePortEndpointChainNameBase", () => {
  const simple = spn("testing", "service", "http", "TCP");
  const long = spn(LONG_NS, LONG_SVC, LONG_PORT, "SCTP");
  const cases: Array<[string, ServicePortName, string, number, string]> = [
    ["simple", simple, "10.180.0.1", 80, "JO2XBXZR-testing/service/tcp/http__10.180.0.1/80"],
    [
      "different endpoint, different hash",
      simple,
      "10.180.0.2",
      80,
      "5S6H3H22-testing/service/tcp/http__10.180.0.2/80",
    ],
    [
      "ipv6",
      simple,
      "fd80:abcd:12::a1b2:c3d4:e5f6:9999",
      80,
      "U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80",
    ],
    [
      "max length without truncation",
      long,
      "1234:5678:9abc:def0::abc:1234",
      443,
      `5YS7AFEA-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}__1234.5678.9abc.def0..abc.1234/443`,
    ],
    [
      "truncated, 1",
      long,
      "1234:5678:9abc:def0::abcd:1234:5678",
      443,
      `CI6C53Q3-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}__1234.5678.9abc.def0..abcd.1234...`,
    ],
    [
      "truncated, 2 (different IP, which is not visible in the result)",
      long,
      "1234:5678:9abc:def0::abcd:1234:8765",
      443,
      `2FLXFK6X-${LONG_NS}/${LONG_SVC}/sctp/${LONG_PORT}__1234.5678.9abc.def0..abcd.1234...`,
    ],
  ];
  for (const [name, n, ip, port, expected] of cases) {
    assert.equal(endpointChainNameBase(n, makeEndpoint(ip, port)), expected, name);
  }
});

test("service chains are told apart by their slash, affinity sets by their prefix", () => {
  assert.ok(isServiceChainName("service-ULMVA6XW-ns1/svc1/tcp/p80"));
  assert.ok(!isServiceChainName("services"));
  assert.ok(isAffinitySetName("affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80"));
  assert.ok(!isAffinitySetName("cluster-ips"));
});
