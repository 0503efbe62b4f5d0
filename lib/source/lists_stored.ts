/**
 * Tells the agent when the store first holds the Services and the EndpointSlices (from a source's first
 * lists, or from the state cache): start-up is over for everything before the first sync, whose peak
 * memory follows. Wraps the StateStore's downstream, like node_validation.ts; every event passes unchanged.
 */
import { forwardingHandlers, type ProxyHandlers } from "../proxy/handlers.ts";

/**
 * `downstream`, and `stored` called once, after both `onServicesSynced` and `onEndpointSlicesSynced` have
 * reached `downstream` (so the proxier has been told first), with the number of Services and EndpointSlices
 * added until then.
 */
export function withListsStored(downstream: ProxyHandlers, stored: (objects: number) => void): ProxyHandlers {
  let services = false;
  let slices = false;
  let told = false;
  let objects = 0;
  const check = () => {
    if (services && slices && !told) {
      told = true;
      stored(objects);
    }
  };
  return {
    ...forwardingHandlers(downstream),
    onServiceAdd: (service) => {
      objects++;
      downstream.onServiceAdd(service);
    },
    onEndpointSliceAdd: (slice) => {
      objects++;
      downstream.onEndpointSliceAdd(slice);
    },
    onServicesSynced: () => {
      downstream.onServicesSynced();
      services = true;
      check();
    },
    onEndpointSlicesSynced: () => {
      downstream.onEndpointSlicesSynced();
      slices = true;
      check();
    },
  };
}
