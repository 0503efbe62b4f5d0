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

/** Builds the EndpointInfo of `fields` on `port` (upstream newBaseEndpointInfo). */
export function newEndpointInfo(fields: EndpointFields, port: number, isLocal: boolean): EndpointInfo {
  return {
    ip: fields.ip,
    port,
    endpoint: joinHostPort(fields.ip, port),
    isLocal,
    ready: fields.ready,
    serving: fields.serving,
    terminating: fields.terminating,
    zoneHints: fields.zoneHints,
    nodeHints: fields.nodeHints,
    nodeName: fields.nodeName,
    zone: fields.zone,
  };
}

/** Upstream's byEndpoint order: by the "ip:port" string, compared bytewise (no locale). */
export function compareEndpoints(a: EndpointInfo, b: EndpointInfo): number {
  return a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0;
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
