/**
 * Shape check of the proxy's own Node. The apiserver guarantees the schema of what it serves, but a manifest
 * or a state cache guarantees nothing, and the consumers (topology labels, podCIDRs for the local-traffic
 * detector, taints and deletionTimestamp for /healthz, addresses for the node IPs) index into these fields.
 * A field of the wrong shape is handled as if it were absent, with one warning naming the Node and the field;
 * an entry of the wrong shape inside a list or map is dropped the same way. Nothing here throws.
 */
import type { Node } from "../k8s/objects.ts";
import { formatValue, type Warn } from "../proxy/service_port.ts";

type Obj = Record<string, unknown>;

/** A Node name that can be logged unquoted (DNS subdomain characters). */
const SAFE_NAME = /^[A-Za-z0-9._-]{1,253}$/;

function isObject(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * A copy of `node` in which every field edgeproxy reads has the schema's shape: metadata.labels a map of
 * strings, metadata.deletionTimestamp a string, spec.podCIDR a string, spec.podCIDRs a list of strings,
 * spec.taints a list of objects, status.addresses a list of objects. Other fields are kept as they are.
 */
export function sanitizeNode(node: Node, warn: Warn): Node {
  if (!isObject(node)) {
    warn(`ignoring Node: not an object (got ${formatValue(node)})`);
    return {};
  }
  const meta = isObject(node.metadata) ? { ...node.metadata } as Obj : undefined;
  const name = meta?.name;
  const ref = `Node ${typeof name === "string" && SAFE_NAME.test(name) ? name : formatValue(name)}`;
  const drop = (field: string, problem: string, value: unknown) =>
    warn(`ignoring ${field} of ${ref}: ${problem} (got ${formatValue(value)})`);
  const out: Obj = { ...node };

  if (node.metadata !== undefined && node.metadata !== null && meta === undefined) {
    drop("metadata", "must be an object", node.metadata);
    delete out.metadata;
  }
  if (meta !== undefined) {
    if (meta.name !== undefined && typeof meta.name !== "string") {
      drop("metadata.name", "must be a string", meta.name);
      delete meta.name;
    }
    meta.labels = stringMap(meta.labels, "metadata.labels", drop);
    if (meta.labels === undefined) delete meta.labels;
    if (
      meta.deletionTimestamp !== undefined && meta.deletionTimestamp !== null &&
      typeof meta.deletionTimestamp !== "string"
    ) {
      drop("metadata.deletionTimestamp", "must be a string", meta.deletionTimestamp);
      delete meta.deletionTimestamp;
    }
    out.metadata = meta;
  }

  if (node.spec !== undefined && node.spec !== null) {
    if (!isObject(node.spec)) {
      drop("spec", "must be an object", node.spec);
      delete out.spec;
    } else {
      const spec: Obj = { ...node.spec };
      if (spec.podCIDR !== undefined && spec.podCIDR !== null && typeof spec.podCIDR !== "string") {
        drop("spec.podCIDR", "must be a string", spec.podCIDR);
        delete spec.podCIDR;
      }
      setOrDelete(spec, "podCIDRs", list(spec.podCIDRs, "spec.podCIDRs", "a string", isString, drop));
      setOrDelete(spec, "taints", list(spec.taints, "spec.taints", "an object", isObject, drop));
      out.spec = spec;
    }
  }

  if (node.status !== undefined && node.status !== null) {
    if (!isObject(node.status)) {
      drop("status", "must be an object", node.status);
      delete out.status;
    } else {
      const status: Obj = { ...node.status };
      setOrDelete(
        status,
        "addresses",
        list(status.addresses, "status.addresses", "an object", isObject, drop),
      );
      out.status = status;
    }
  }
  return out as Node;
}

type Drop = (field: string, problem: string, value: unknown) => void;

function isString(v: unknown): v is string {
  return typeof v === "string";
}

function setOrDelete(o: Obj, key: string, v: unknown): void {
  if (v === undefined) delete o[key];
  else o[key] = v;
}

/** A list field: absent when not a list; entries of the wrong kind dropped. */
function list(
  v: unknown,
  field: string,
  entryKind: string,
  ok: (e: unknown) => boolean,
  drop: Drop,
): unknown[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) {
    drop(field, "must be a list", v);
    return undefined;
  }
  const out: unknown[] = [];
  v.forEach((e, i) => {
    if (ok(e)) out.push(e);
    else drop(`${field}[${i}]`, `must be ${entryKind}`, e);
  });
  return out;
}

/** A map of strings: absent when not a map; entries whose value is not a string dropped. */
function stringMap(v: unknown, field: string, drop: Drop): Record<string, string> | undefined {
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) {
    drop(field, "must be a map", v);
    return undefined;
  }
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) {
    if (typeof val === "string") out[k] = val;
    else drop(`${field}[${JSON.stringify(k)}]`, "must be a string", val);
  }
  return out;
}
