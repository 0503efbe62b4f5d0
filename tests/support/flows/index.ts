/**
 * Backend-neutral packet-flow tables: the conformance cases every proxy mode runs, the way every router of
 * a web framework runs one shared case file.
 *
 * A table (types.ts) is plain data: a cluster (Services with their endpoints, the proxy settings that
 * change outcomes) and flows (a sender, a destination, the expected outcome in Service terms: which
 * endpoints may receive the packet and whether they see the sender's address, or reject / drop / accept /
 * untouched), optionally followed by steps (Services deleted, endpoints replaced) with more flows. The
 * addresses are upstream proxier_test.go's (addresses.ts).
 *
 * How a backend runs them:
 *  1. For each table in FLOW_TABLES, build the backend from `config` (family, masqueradeAll, the local
 *     detector on CLUSTER_CIDR, nodePortAddresses, localhostNodePorts) and load `services` (one
 *     service port per FlowServicePort, each endpoint serving every port on its targetPort; an endpoint is
 *     local when its node is THIS_NODE), then sync.
 *  2. For each flow, decide what happens to the packet — a rule tracer follows its rules (the iptables
 *     runner: tests/unit/proxy/iptables/render/flows_test.ts with tests/support/tracer.ts), a state model looks up its
 *     virtual servers, a userspace model asks its balancer, a real-traffic runner sends packets
 *     (tests/e2e/conformance/traffic_test.ts) — and compare with `expect`: for `dnat`, the set of
 *     endpoints that can be chosen and whether the source is masqueraded; `sticky` flows must keep one
 *     endpoint per client where the backend can observe that.
 *  3. For each step of `then`, apply it, sync (a partial sync where the backend has them) and check its
 *     flows the same way.
 * A backend that cannot express a sender or a setting (e.g. a real-traffic topology has no host for an
 * "lb-ip" sender) skips that flow and says so; it never changes an expectation.
 */
import { AFFINITY_TABLES } from "./affinity.ts";
import { CLUSTER_IP_TABLES } from "./cluster_ip.ts";
import { LOAD_BALANCER_TABLES } from "./load_balancer.ts";
import { MASQUERADE_TABLES } from "./masquerade.ts";
import { NODE_PORT_TABLES } from "./node_ports.ts";
import { TRAFFIC_POLICY_TABLES } from "./traffic_policy.ts";
import { UDP_TABLES } from "./udp.ts";
import type { FlowTable } from "./types.ts";

export * from "./types.ts";
export * from "./addresses.ts";

/** Every table, in a stable order. */
export const FLOW_TABLES: readonly FlowTable[] = [
  ...MASQUERADE_TABLES,
  ...LOAD_BALANCER_TABLES,
  ...NODE_PORT_TABLES,
  ...CLUSTER_IP_TABLES,
  ...TRAFFIC_POLICY_TABLES,
  ...AFFINITY_TABLES,
  ...UDP_TABLES,
];
