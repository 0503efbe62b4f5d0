/**
 * What the proxy never reads of an API object, dropped where objects enter the informer store
 * (ResourceSink.check, for lists and watch events alike), so neither the store, the proxier's state nor
 * the state cache holds it. On a real cluster these fields are often most of an object's bytes: the
 * server-side-apply history (`metadata.managedFields`), kubectl's copy of the last applied manifest
 * (`kubectl.kubernetes.io/last-applied-configuration`), owner references, and each endpoint's `targetRef`
 * (the Pod it points to; the proxier keys endpoints by address, upstream's endpointSliceCache ignores it).
 *
 * Pure: returns the object itself when there is nothing to drop, else a copy (the input is not changed).
 */
import type { KubeObject } from "./store.ts";
import type { EndpointValueTable } from "./endpoint_values.ts";

/** kubectl's annotation holding the whole last applied manifest. */
export const LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration";

/**
 * `obj` without the fields listed in the module comment; with `values`, an EndpointSlice's endpoints
 * also hold the table's shared conditions objects and node and zone names (endpoint_values.ts).
 */
export function reduceObject<T extends KubeObject>(obj: T, values?: EndpointValueTable): T {
  let out = obj;
  const meta = obj.metadata as
    | (Record<string, unknown> & { annotations?: Record<string, string> })
    | undefined;
  if (
    meta !== undefined &&
    ("managedFields" in meta || "ownerReferences" in meta ||
      (typeof meta.annotations === "object" && meta.annotations !== null &&
        LAST_APPLIED_ANNOTATION in meta.annotations))
  ) {
    const { managedFields: _m, ownerReferences: _o, ...rest } = meta;
    if (rest.annotations && LAST_APPLIED_ANNOTATION in rest.annotations) {
      const { [LAST_APPLIED_ANNOTATION]: _l, ...annotations } = rest.annotations;
      if (Object.keys(annotations).length > 0) rest.annotations = annotations;
      else delete rest.annotations;
    }
    out = { ...out, metadata: rest };
  }
  const endpoints = (obj as { endpoints?: unknown }).endpoints;
  if (obj.kind === "EndpointSlice" && Array.isArray(endpoints)) {
    let reduced: readonly unknown[] = endpoints;
    const stripped = endpoints.some(hasTargetRef);
    if (stripped) {
      reduced = endpoints.map((e) => {
        if (!hasTargetRef(e)) return { ...(e as Record<string, unknown>) };
        const { targetRef: _t, ...rest } = e as Record<string, unknown>;
        return rest;
      });
    }
    // Endpoints copied above are this function's own: the table may change them in place.
    if (values !== undefined) reduced = values.share(reduced, stripped);
    if (reduced !== endpoints) out = { ...out, endpoints: reduced };
  }
  return out;
}

function hasTargetRef(e: unknown): boolean {
  return typeof e === "object" && e !== null && "targetRef" in e;
}
