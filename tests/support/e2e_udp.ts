/**
 * UDP requests that can tell "port unreachable" (a REJECT) from silence (a DROP). Deno's node:dgram never
 * reports the ICMP error on a connected UDP socket (measured: a UDP send to a closed port on loopback times
 * out under Deno, is ECONNREFUSED under Bun and in Python), so the echo client runs under Bun here, whatever
 * runtime runs the test.
 */
import { fileURLToPath } from "node:url";
import type { EchoResult } from "./echo_server.ts";
import type { Netns } from "./netns.ts";

const BUN = fileURLToPath(new URL("../../node_modules/.bin/bun", import.meta.url));
const CLIENT = fileURLToPath(new URL("./echo_client.ts", import.meta.url));

/** `count` UDP requests from inside `ns`; each is a reply, "refused" (ICMP port unreachable) or "timeout". */
export async function udpRequestSeeingRejects(
  ns: Netns,
  opts: { host: string; port: number; timeoutMs?: number; count?: number },
): Promise<EchoResult[]> {
  const timeoutMs = opts.timeoutMs ?? 2000;
  const count = opts.count ?? 1;
  const argv = [BUN, "run", CLIENT, "--host", opts.host, "--port", String(opts.port), "--proto", "udp"];
  argv.push("--timeout", String(timeoutMs), "--count", String(count));
  const r = await ns.exec(argv, { timeoutMs: 30000 + timeoutMs * count });
  if (r.code !== 0) {
    throw new Error(`UDP echo client (bun) in ${ns.name} exited ${r.code}: ${r.stderr.trim()}`);
  }
  return JSON.parse(r.stdout.trim().split("\n").pop() ?? "") as EchoResult[];
}
