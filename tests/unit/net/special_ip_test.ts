import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Service } from "../../../lib/k8s/objects.ts";
import { nonSpecialIPProblem } from "../../../lib/net/special_ip.ts";
import { servicePortsFromService } from "../../../lib/proxy/service_port.ts";
import { endpointSliceDataFromSlice } from "../../../lib/proxy/endpoint_slice_cache.ts";

describe("nonSpecialIPProblem (upstream ValidateNonSpecialIP)", () => {
  it("refuses unspecified, loopback, link-local and link-local multicast addresses of both families", () => {
    const refused: Array<[string, RegExp]> = [
      ["0.0.0.0", /unspecified/],
      ["::", /unspecified/],
      ["127.0.0.1", /loopback/],
      ["127.255.0.9", /loopback/],
      ["::1", /loopback/],
      ["169.254.169.254", /link-local range/],
      ["fe80::1", /link-local range/],
      ["febf::1", /link-local range/],
      ["224.0.0.251", /link-local multicast/],
      ["ff02::1", /link-local multicast/],
      ["ff12::1", /link-local multicast/],
    ];
    for (const [ip, want] of refused) assert.match(nonSpecialIPProblem(ip) ?? "(accepted)", want, ip);
  });

  it("accepts what upstream accepts, including other multicast and broadcast", () => {
    for (
      const ip of [
        "10.0.0.1",
        "192.168.0.2",
        "203.0.113.9",
        "224.0.1.1",
        "239.1.1.1",
        "255.255.255.255",
        "128.0.0.1",
        "fd00::1",
        "fec0::1",
        "ff05::1",
        "2001:db8::1",
      ]
    ) {
      assert.equal(nonSpecialIPProblem(ip), null, ip);
    }
  });
});

describe("model conversion applies it where upstream validation does", () => {
  const service = (spec: NonNullable<Service["spec"]>, status?: Service["status"]): Service => ({
    metadata: { namespace: "site", name: "web" },
    spec,
    ...(status ? { status } : {}),
  });

  it("drops a loopback or link-local external IP with one warning naming object and field; the rest stays", () => {
    const warnings: string[] = [];
    const ports = servicePortsFromService(
      service({
        clusterIP: "10.96.0.20",
        externalIPs: ["127.0.0.1", "203.0.113.9", "169.254.169.254", "::1"],
        ports: [{ port: 80 }],
      }),
      "IPv4",
      (m) => warnings.push(m),
    );
    assert.equal(ports.length, 1);
    assert.deepEqual(ports[0].externalIPs, ["203.0.113.9"]);
    assert.deepEqual(warnings, [
      'ignoring spec.externalIPs[0] of Service site/web: may not be in the loopback range (127.0.0.0/8, ::1/128) (got "127.0.0.1")',
      'ignoring spec.externalIPs[2] of Service site/web: may not be in the link-local range (169.254.0.0/16, fe80::/10) (got "169.254.169.254")',
    ]);
    // The IPv6 proxier reports the IPv6 entry, once.
    const v6: string[] = [];
    servicePortsFromService(
      service({
        clusterIPs: ["10.96.0.20", "fd00::20"],
        externalIPs: ["127.0.0.1", "::1"],
        ports: [{ port: 80 }],
      }),
      "IPv6",
      (m) => v6.push(m),
    );
    assert.deepEqual(v6, [
      'ignoring spec.externalIPs[1] of Service site/web: may not be in the loopback range (127.0.0.0/8, ::1/128) (got "::1")',
    ]);
  });

  it("refuses a special cluster IP (the allocator never hands one out) and drops a special LB ingress IP", () => {
    const warnings: string[] = [];
    const ports = servicePortsFromService(
      service({ clusterIP: "127.0.0.53", ports: [{ port: 53, protocol: "UDP" }] }),
      "IPv4",
      (m) => warnings.push(m),
    );
    assert.deepEqual(ports, []);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /spec\.clusterIP: may not be in the loopback range .*"127\.0\.0\.53"/);

    const lbWarnings: string[] = [];
    const lbPorts = servicePortsFromService(
      service({ type: "LoadBalancer", clusterIP: "10.96.0.20", ports: [{ port: 80, nodePort: 30080 }] }, {
        loadBalancer: { ingress: [{ ip: "169.254.10.1" }, { ip: "198.51.100.7" }] },
      }),
      "IPv4",
      (m) => lbWarnings.push(m),
    );
    assert.deepEqual(lbPorts[0].loadBalancerVIPs, ["198.51.100.7"]);
    assert.deepEqual(lbWarnings, [
      'ignoring status.loadBalancer.ingress[0] of Service site/web: ip: may not be in the link-local range (169.254.0.0/16, fe80::/10) (got "169.254.10.1")',
    ]);
  });

  it("accepts ordinary cluster IPs and load-balancer ingress IPs", () => {
    const warnings: string[] = [];
    const ports = servicePortsFromService(
      service({ type: "LoadBalancer", clusterIP: "10.96.0.20", ports: [{ port: 80, nodePort: 30080 }] }, {
        loadBalancer: { ingress: [{ ip: "198.51.100.7" }] },
      }),
      "IPv4",
      (m) => warnings.push(m),
    );
    assert.deepEqual(warnings, []);
    assert.deepEqual(ports[0].loadBalancerVIPs, ["198.51.100.7"]);
  });

  it("drops an endpoint whose address is special, keeps the others of the slice", () => {
    const slice: EndpointSlice = {
      metadata: { namespace: "site", name: "web-1", labels: { "kubernetes.io/service-name": "web" } },
      addressType: "IPv4",
      endpoints: [
        { addresses: ["127.0.0.1"] },
        { addresses: ["10.244.1.5"] },
        { addresses: ["169.254.169.254"] },
        { addresses: ["0.0.0.0"] },
      ],
      ports: [{ port: 8080 }],
    };
    const warnings: string[] = [];
    const data = endpointSliceDataFromSlice(slice, "IPv4", (m) => warnings.push(m));
    assert.deepEqual(data.endpoints.map((e) => e.ip), ["10.244.1.5"]);
    assert.deepEqual(warnings, [
      'ignoring endpoints[0] of EndpointSlice site/web-1: addresses[0]: may not be in the loopback range (127.0.0.0/8, ::1/128) (got "127.0.0.1")',
      'ignoring endpoints[2] of EndpointSlice site/web-1: addresses[0]: may not be in the link-local range (169.254.0.0/16, fe80::/10) (got "169.254.169.254")',
      'ignoring endpoints[3] of EndpointSlice site/web-1: addresses[0]: may not be unspecified (got "0.0.0.0")',
    ]);
  });
});
