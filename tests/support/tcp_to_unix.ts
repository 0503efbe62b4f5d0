/**
 * Entry point run inside a network namespace: `tcp_to_unix.ts <host> <port> <unix-socket-path>`.
 * Prints "listening" once ready and runs until killed.
 */
import process from "node:process";
import { serveTcpToUnix } from "./socket_bridge.ts";

const [host, port, path] = process.argv.slice(2);
if (!host || !port || !path) {
  console.error("usage: tcp_to_unix.ts <host> <port> <unix-socket-path>");
  process.exit(2);
}
await serveTcpToUnix(host, Number(port), path);
console.log("listening");
