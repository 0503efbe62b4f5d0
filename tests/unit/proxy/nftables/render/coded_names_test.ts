/**
 * Coded chain and affinity-set names (lib/proxy/nftables/render/coded_names.ts): decoding gives back
 * exactly the names coded, in order, for every name the renderer makes (service-level and endpoint chains,
 * IPv6 endpoints, names cut to nftables' length, unnamed ports) and for names of any other form; the
 * renderer's names are coded without their base.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  codeNames,
  decodeNames,
  decodeNamesNotIn,
  nameBaseOfKey,
} from "../../../../../lib/proxy/nftables/render/coded_names.ts";
import {
  endpointChainNameBase,
  endpointNames,
  servicePortChainNameBase,
  servicePortChainNames,
} from "../../../../../lib/proxy/nftables/render/names.ts";
import { servicePortKey, type ServicePortName } from "../../../../../lib/proxy/types.ts";
import { makeEndpoint } from "../../../../support/tracer.ts";

/** Every name the renderer makes for `name` and endpoints `ips` (port 8080), chains then affinity sets. */
function renderedNames(name: ServicePortName, ips: readonly string[]): { chains: string[]; sets: string[] } {
  const s = servicePortChainNames(name);
  const eps = ips.map((ip) => endpointNames(name, makeEndpoint(ip, 8080)));
  return {
    chains: [...eps.map((e) => e.chain), s.clusterPolicy, s.localPolicy, s.external, s.firewall],
    sets: eps.map((e) => e.affinitySet),
  };
}

const NAMES: readonly ServicePortName[] = [
  { namespace: "ns1", name: "svc1", port: "p80", protocol: "TCP" },
  { namespace: "kube-system", name: "dns", port: "", protocol: "UDP" },
  { namespace: "ns", name: "sctp", port: "x", protocol: "SCTP" },
  // Long enough for the endpoint chain names to be cut to nftables' length ("..." tail).
  { namespace: "n".repeat(63), name: "s".repeat(63), port: "p".repeat(15), protocol: "TCP" },
  { namespace: "n".repeat(63), name: "s".repeat(63), port: "q".repeat(100), protocol: "TCP" },
];

test("nameBaseOfKey is the unhashed base of the service port's chain names", () => {
  for (const name of NAMES) {
    const hashed = servicePortChainNameBase(name);
    const base = nameBaseOfKey(servicePortKey(name));
    if (hashed.endsWith("...")) assert.ok(`${hashed.slice(0, 9)}${base}`.startsWith(hashed.slice(0, -3)));
    else assert.equal(hashed.slice(9), base);
  }
  assert.equal(nameBaseOfKey("ns1/svc1:p80/TCP"), "ns1/svc1/tcp/p80");
  assert.equal(nameBaseOfKey("ns1/svc1/UDP"), "ns1/svc1/udp/");
});

test("decodeNames gives back the renderer's names exactly, in order, and codes them short", () => {
  for (const name of NAMES) {
    const base = nameBaseOfKey(servicePortKey(name));
    const { chains, sets } = renderedNames(name, ["10.1.0.1", "10.1.0.2", "fd00::1", "2001:db8::ff"]);
    for (const names of [chains, sets, chains.slice(0, 1), sets.slice(2)]) {
      const coded = codeNames(names, base);
      assert.equal(typeof coded, "string");
      assert.deepEqual(decodeNames(coded, base), names);
    }
    const coded = codeNames(chains, base) as string;
    if (!servicePortChainNameBase(name).endsWith("...")) {
      assert.ok(!coded.includes(base), `base left out of ${coded}`);
      assert.ok(
        coded.length < chains.join("\n").length / 2,
        `${coded.length} of ${chains.join("\n").length}`,
      );
    }
  }
  const name = NAMES[0];
  const ep = endpointChainNameBase(name, makeEndpoint("10.1.0.1", 8080));
  assert.equal(
    decodeNames(codeNames([`endpoint-${ep}`], "ns1/svc1/tcp/p80"), "ns1/svc1/tcp/p80")[0],
    `endpoint-${ep}`,
  );
});

test("names of any other form are kept whole", () => {
  const base = "ns1/svc1/tcp/p80";
  const odd = [
    "services", // a fixed chain
    "service-ABCDEFGH-ns2/svc1/tcp/p80", // another service port's base
    "service-ABCDEFGH-ns1/svc1/tcp/p8", // a shorter base
    "service-ABCDEFGHns1/svc1/tcp/p80", // no "-" after the hash
    "service-ABC", // too short
    "service-",
    "endpoint-ABCDEFGH-", // nothing after the hash
    "~service-ABCDEFGH-ns1/svc1/tcp/p80",
    "0ABCDEFGH",
    "",
    "service-ABCDEFGH-ns1/svc1/tcp/p80", // and one of the right form among them
  ];
  const coded = codeNames(odd, base);
  assert.equal(typeof coded, "string");
  assert.deepEqual(decodeNames(coded, base), odd);
  assert.deepEqual(decodeNames(codeNames(odd.slice(0, 1), "x"), "x"), odd.slice(0, 1));
  // A newline would be read as a separator: such names are kept as they are.
  const withNewline = ["service-ABCDEFGH-ns1/svc1/tcp/p80", "a\nb"];
  const kept = codeNames(withNewline, base);
  assert.deepEqual(kept, withNewline);
  assert.notEqual(kept, withNewline);
  assert.deepEqual(decodeNames(kept, base), withNewline);
  assert.equal(codeNames([], base), "");
  assert.deepEqual(decodeNames("", base), []);
});

test("decodeNamesNotIn decodes exactly the names of one coding missing from another", () => {
  const name = NAMES[0];
  const base = nameBaseOfKey(servicePortKey(name));
  // Endpoint names that are prefixes of one another's code (10.1.0.1 and 10.1.0.10, port 80 and 8080).
  const ep = (ip: string, port: number) => endpointNames(name, makeEndpoint(ip, port)).chain;
  const s = servicePortChainNames(name);
  const all = [
    ep("10.1.0.1", 80),
    ep("10.1.0.10", 80),
    ep("10.1.0.1", 8080),
    s.clusterPolicy,
    s.external,
    "odd",
  ];
  const rnd = (() => {
    let a = 7;
    return () => (a = (a * 1103515245 + 12345) % 2147483648) / 2147483648;
  })();
  for (let k = 0; k < 200; k++) {
    const a = all.filter(() => rnd() < 0.6);
    const b = all.filter(() => rnd() < 0.6);
    const want = a.filter((n) => !b.includes(n));
    const ca = codeNames(a, base);
    const cb = codeNames(b, base);
    assert.deepEqual(decodeNamesNotIn(ca, cb, base), want, `${a} minus ${b}`);
    // Either side kept whole (a name with a newline elsewhere) answers the same.
    assert.deepEqual(decodeNamesNotIn([...a], cb, base), want);
    assert.deepEqual(decodeNamesNotIn(ca, [...b], base), want);
    assert.deepEqual(decodeNamesNotIn(ca, null, base), a);
  }
  assert.deepEqual(decodeNamesNotIn("", "", base), []);
  assert.deepEqual(decodeNamesNotIn("", null, base), []);
});
