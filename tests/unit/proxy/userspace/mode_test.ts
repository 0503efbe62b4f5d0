import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { backendFor, PROXY_BACKENDS } from "../../../../lib/app/backends.ts";
import { validateConfig } from "../../../../lib/config/validate.ts";
import { defaultConfig } from "../../../../lib/config/defaults.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { registerUserspaceMetrics } from "../../../../lib/proxy/userspace/metrics.ts";

describe("userspace mode wiring", () => {
  it("is a backend and a valid mode", () => {
    assert.ok(Object.hasOwn(PROXY_BACKENDS, "userspace"));
    const b = backendFor("userspace");
    const c = { ...defaultConfig(), mode: "userspace" };
    assert.deepEqual(validateConfig(c).filter((e) => e.path === "mode"), []);
    assert.deepEqual(b.syncPeriods(c), {
      minSyncPeriodMs: c.iptables.minSyncPeriod,
      syncPeriodMs: c.iptables.syncPeriod,
    });
  });

  it("exports edgeproxy_userspace_* per service port", () => {
    const registry = new Registry();
    const counters = new Map([["ns/web:http/TCP", {
      connections: 3,
      bytesIn: 10,
      bytesOut: 20,
      dialErrors: 1,
      noEndpoints: 2,
    }]]);
    registerUserspaceMetrics(registry, () => [["IPv4", counters]]);
    const text = registry.metrics();
    for (
      const line of [
        'edgeproxy_userspace_connections_total{ip_family="IPv4",service_port="ns/web:http/TCP"} 3',
        'edgeproxy_userspace_dial_errors_total{ip_family="IPv4",service_port="ns/web:http/TCP"} 1',
        'edgeproxy_userspace_no_endpoints_total{ip_family="IPv4",service_port="ns/web:http/TCP"} 2',
        'edgeproxy_userspace_bytes_total{direction="in",ip_family="IPv4",service_port="ns/web:http/TCP"} 10',
        'edgeproxy_userspace_bytes_total{direction="out",ip_family="IPv4",service_port="ns/web:http/TCP"} 20',
      ]
    ) assert.ok(text.includes(line), `missing ${line} in\n${text}`);
  });
});
