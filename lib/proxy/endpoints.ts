/**
 * Endpoints as the proxier sees them (upstream pkg/proxy/endpoint.go BaseEndpointInfo): construction,
 * ordering and equality of EndpointInfo values.
 */
import type { EndpointInfo } from "./types.ts";
import { joinHostPort } from "../net/go_net.ts";

/**
 * Fields of one endpoint address of an EndpointSlice (its addresses[0]), already validated and normalised:
 * an {@link EndpointInfo} before it is paired with a port and a locality.
 */
export type EndpointFields = Omit<EndpointInfo, "port" | "endpoint" | "isLocal">;

const LOCAL = 1;
const READY = 2;
const SERVING = 4;
const TERMINATING = 8;

/**
 * Where an endpoint runs and which topology hints it carries: the fields most endpoints share with many
 * others (one node's endpoints all have its name and zone, and hints are rare). Immutable.
 */
export interface EndpointPlacement {
  readonly nodeName: string;
  readonly zone: string;
  readonly zoneHints: readonly string[] | null;
  readonly nodeHints: readonly string[] | null;
}

/**
 * The EndpointInfo the cache builds, in 4 slots instead of 11 (the model holds one per endpoint and port,
 * 65k at 10k Services: ~48 bytes each under JavaScriptCore instead of ~80): the four conditions packed
 * into one number, the node, zone and hints in a {@link EndpointPlacement} shared between endpoints
 * (EndpointSliceCache interns them), and the "ip:port" string made when read instead of held (65k strings,
 * ~3 MiB of heap at 10k; the renderers read it once or twice per render, and {@link compareEndpoints} never
 * makes it). Readers see an ordinary EndpointInfo through getters. `flags` and `placement` are own
 * enumerable fields, so structural comparison (sameValue) still sees every field; the endpoint string
 * follows from `ip` and `port`.
 */
export class PackedEndpointInfo implements EndpointInfo {
  readonly ip: string;
  readonly port: number;
  /** isLocal, ready, serving and terminating as bits 0-3; read those instead. */
  readonly flags: number;
  readonly placement: EndpointPlacement;

  constructor(ip: string, port: number, flags: number, placement: EndpointPlacement) {
    this.ip = ip;
    this.port = port;
    this.flags = flags;
    this.placement = placement;
  }

  /** "ip:port" ("[ip]:port" for IPv6), made on each read. */
  get endpoint(): string {
    return joinHostPort(this.ip, this.port);
  }

  get isLocal(): boolean {
    return (this.flags & LOCAL) !== 0;
  }

  get ready(): boolean {
    return (this.flags & READY) !== 0;
  }

  get serving(): boolean {
    return (this.flags & SERVING) !== 0;
  }

  get terminating(): boolean {
    return (this.flags & TERMINATING) !== 0;
  }

  get nodeName(): string {
    return this.placement.nodeName;
  }

  get zone(): string {
    return this.placement.zone;
  }

  get zoneHints(): readonly string[] | null {
    return this.placement.zoneHints;
  }

  get nodeHints(): readonly string[] | null {
    return this.placement.nodeHints;
  }
}

/** The conditions of `fields` and the locality as PackedEndpointInfo's flags. */
function flagsOf(fields: EndpointFields, isLocal: boolean): number {
  return (isLocal ? LOCAL : 0) | (fields.ready ? READY : 0) | (fields.serving ? SERVING : 0) |
    (fields.terminating ? TERMINATING : 0);
}

/**
 * Builds the EndpointInfo of `fields` on `port` (upstream newBaseEndpointInfo). `placement` is `fields`'
 * node, zone and hints as an interned, shared object (EndpointSliceCache); without it a new one is made.
 */
export function newEndpointInfo(
  fields: EndpointFields,
  port: number,
  isLocal: boolean,
  placement: EndpointPlacement = placementOf(fields),
): EndpointInfo {
  return new PackedEndpointInfo(fields.ip, port, flagsOf(fields, isLocal), placement);
}

/** A new EndpointPlacement of `fields`. */
export function placementOf(fields: EndpointFields): EndpointPlacement {
  return {
    nodeName: fields.nodeName,
    zone: fields.zone,
    zoneHints: fields.zoneHints,
    nodeHints: fields.nodeHints,
  };
}

/** The fields of any EndpointInfo as a plain object literal (for logs and tests). */
export function plainEndpointInfo(ep: EndpointInfo): EndpointInfo {
  return {
    ip: ep.ip,
    port: ep.port,
    endpoint: ep.endpoint,
    isLocal: ep.isLocal,
    ready: ep.ready,
    serving: ep.serving,
    terminating: ep.terminating,
    zoneHints: ep.zoneHints,
    nodeHints: ep.nodeHints,
    nodeName: ep.nodeName,
    zone: ep.zone,
  };
}

/**
 * Upstream's byEndpoint order: by the "ip:port" string ("[ip]:port" for IPv6), compared by UTF-16 code
 * unit as `<` does, without making either string (sorting 65k endpoints would make two per comparison).
 */
export function compareEndpoints(a: EndpointInfo, b: EndpointInfo): number {
  const a6 = a.ip.includes(":");
  if (a6 !== b.ip.includes(":")) return a6 ? 1 : -1; // "[" sorts after every digit
  if (a.ip !== b.ip) {
    const n = Math.min(a.ip.length, b.ip.length);
    for (let i = 0; i < n; i++) {
      const d = a.ip.charCodeAt(i) - b.ip.charCodeAt(i);
      if (d !== 0) return d < 0 ? -1 : 1;
    }
    // One address is a prefix of the other: the shorter goes on with ":" ("]" for IPv6), which no
    // address holds at that place, the longer with its next character.
    const after = a6 ? 0x5d : 0x3a;
    return a.ip.length < b.ip.length
      ? (after < b.ip.charCodeAt(n) ? -1 : 1)
      : (a.ip.charCodeAt(n) < after ? -1 : 1);
  }
  const pa = String(a.port);
  const pb = String(b.port);
  return pa < pb ? -1 : pa > pb ? 1 : 0;
}

function hintsEqual(a: readonly string[] | null, b: readonly string[] | null): boolean {
  if (a === null || b === null) return a === b;
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Deep equality of two EndpointInfos. */
export function endpointInfoEqual(a: EndpointInfo, b: EndpointInfo): boolean {
  return a.endpoint === b.endpoint && a.ip === b.ip && a.port === b.port && a.isLocal === b.isLocal &&
    a.ready === b.ready && a.serving === b.serving && a.terminating === b.terminating &&
    a.nodeName === b.nodeName && a.zone === b.zone && hintsEqual(a.zoneHints, b.zoneHints) &&
    hintsEqual(a.nodeHints, b.nodeHints);
}
