/** Small constructors that keep the tables short; they build plain data only. */
import type { Flow, FlowDestination, FlowOutcome, FlowProtocol, FlowSource } from "./types.ts";

/** Delivered to one of `eps`, the endpoint seeing the client's own address. */
export function dnat(eps: readonly string[] | string): FlowOutcome {
  return { dnat: typeof eps === "string" ? [eps] : eps, source: "preserved" };
}

/** Delivered to one of `eps`, masqueraded (the endpoint sees a node address). */
export function dnatMasq(eps: readonly string[] | string): FlowOutcome {
  return { dnat: typeof eps === "string" ? [eps] : eps, source: "masqueraded" };
}

/** Refused. */
export const REJECT: FlowOutcome = { verdict: "reject" };
/** Silently dropped. */
export const DROP: FlowOutcome = { verdict: "drop" };
/** Let through to a listener on the node. */
export const ACCEPT: FlowOutcome = { verdict: "accept" };
/** Not touched by the proxy. */
export const NONE: FlowOutcome = { verdict: "none" };

/** A flow to ip:port (TCP unless given). */
export function flow(
  name: string,
  from: FlowSource,
  to: readonly [string, number, FlowProtocol?],
  expect: FlowOutcome,
): Flow {
  const [ip, port, protocol] = to;
  const dest: FlowDestination = protocol === undefined ? { ip, port } : { ip, port, protocol };
  return { name, from, to: dest, expect };
}

/**
 * The base flows with some outcomes replaced by name. Every override must name a flow and change its
 * outcome: an override that changes nothing would make the variant test nothing new.
 */
export function withOverrides(
  flows: readonly Flow[],
  overrides: Readonly<Record<string, FlowOutcome>>,
): Flow[] {
  const names = new Set(flows.map((f) => f.name));
  for (const name of Object.keys(overrides)) {
    if (!names.has(name)) throw new Error(`flow override names no flow: ${JSON.stringify(name)}`);
  }
  return flows.map((f) => {
    const o = overrides[f.name];
    if (o === undefined) return f;
    if (JSON.stringify(o) === JSON.stringify(f.expect)) {
      throw new Error(`flow override of ${JSON.stringify(f.name)} changes nothing`);
    }
    return { ...f, expect: o };
  });
}
