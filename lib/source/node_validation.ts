/**
 * Puts every Node event through the shape check of lib/source/node_shape.ts before it reaches the proxiers and the
 * health server, whatever its source (apiserver, manifests, state cache): all of them feed the StateStore,
 * whose downstream this wraps. Services, EndpointSlices and ServiceCIDRs pass unchanged; their validation is
 * part of the model conversion (lib/proxy/service_port.ts, endpoint_slice_cache.ts,
 * lib/source/service_cidrs.ts).
 *
 * A Node is re-sent on every status update, so a warning is logged once while the same problem persists,
 * not once per event.
 */
import type { Node } from "../k8s/objects.ts";
import { sanitizeNode } from "./node_shape.ts";
import type { Warn } from "../proxy/service_port.ts";
import type { ProxyHandlers } from "../proxy/handlers.ts";

/** `downstream` with every Node it receives shape-checked first. */
export function withNodeValidation(downstream: ProxyHandlers, warn: Warn): ProxyHandlers {
  let lastWarnings = new Set<string>();
  const check = (node: Node): Node => {
    const warnings = new Set<string>();
    const clean = sanitizeNode(node, (m) => warnings.add(m));
    for (const w of warnings) if (!lastWarnings.has(w)) warn(w);
    lastWarnings = warnings;
    return clean;
  };
  return {
    onServiceAdd: (s) => downstream.onServiceAdd(s),
    onServiceUpdate: (o, s) => downstream.onServiceUpdate(o, s),
    onServiceDelete: (s) => downstream.onServiceDelete(s),
    onServicesSynced: () => downstream.onServicesSynced(),
    onEndpointSliceAdd: (s) => downstream.onEndpointSliceAdd(s),
    onEndpointSliceUpdate: (o, s) => downstream.onEndpointSliceUpdate(o, s),
    onEndpointSliceDelete: (s) => downstream.onEndpointSliceDelete(s),
    onEndpointSlicesSynced: () => downstream.onEndpointSlicesSynced(),
    onNodeAdd: (n) => downstream.onNodeAdd(check(n)),
    // The old object was checked when it arrived; the check is pure, so re-running it gives the same copy.
    onNodeUpdate: (o, n) => downstream.onNodeUpdate(sanitizeNode(o, () => {}), check(n)),
    onNodeDelete: (n) => {
      lastWarnings = new Set();
      downstream.onNodeDelete(sanitizeNode(n, () => {}));
    },
    onNodeSynced: () => downstream.onNodeSynced(),
    onServiceCIDRAdd: (c) => downstream.onServiceCIDRAdd?.(c),
    onServiceCIDRUpdate: (o, c) => downstream.onServiceCIDRUpdate?.(o, c),
    onServiceCIDRDelete: (c) => downstream.onServiceCIDRDelete?.(c),
    onServiceCIDRsSynced: () => downstream.onServiceCIDRsSynced?.(),
    onServiceCIDRsChanged: (cidrs) => downstream.onServiceCIDRsChanged?.(cidrs),
  };
}
