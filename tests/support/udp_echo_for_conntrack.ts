/**
 * A tiny UDP echo for the conntrack e2e test, run inside a network namespace with
 * `ip netns exec <ns> <runtime> tests/support/udp_echo_for_conntrack.ts ...`.
 *
 *   serve <port> <ip>...                 echo on each ip:port; prints "ready" once all are bound. Each
 *                                        socket is bound to its own address, so replies leave from the
 *                                        address the (DNATed) request reached, as conntrack expects.
 *   send <srcIP> <srcPort> <dstIP> <dstPort>
 *                                        sends one datagram from srcIP:srcPort, waits up to 2 s for the
 *                                        echo, prints "reply from <ip>:<port> <payload>" and exits 0;
 *                                        exits 1 on timeout.
 */
import dgram from "node:dgram";
import process from "node:process";

function bind(sock: dgram.Socket, port: number, address: string): Promise<void> {
  return new Promise((resolve, reject) => {
    sock.once("error", reject);
    sock.bind({ port, address, exclusive: true }, () => {
      sock.off("error", reject);
      resolve();
    });
  });
}

async function serve(port: number, ips: string[]): Promise<void> {
  for (const ip of ips) {
    const sock = dgram.createSocket(ip.includes(":") ? "udp6" : "udp4");
    sock.on("message", (msg, rinfo) => sock.send(msg, rinfo.port, rinfo.address));
    await bind(sock, port, ip);
  }
  process.stdout.write("ready\n");
}

async function send(srcIP: string, srcPort: number, dstIP: string, dstPort: number): Promise<void> {
  const sock = dgram.createSocket(dstIP.includes(":") ? "udp6" : "udp4");
  await bind(sock, srcPort, srcIP);
  const timer = setTimeout(() => {
    process.stdout.write(`timeout waiting for ${dstIP}:${dstPort}\n`);
    process.exit(1);
  }, 2000);
  sock.once("message", (msg, rinfo) => {
    clearTimeout(timer);
    process.stdout.write(`reply from ${rinfo.address}:${rinfo.port} ${msg.toString()}\n`);
    sock.close();
    process.exit(0);
  });
  sock.send(Buffer.from(`ping-${srcPort}`), dstPort, dstIP);
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "serve" && rest.length >= 2) {
  await serve(Number(rest[0]), rest.slice(1));
} else if (mode === "send" && rest.length === 4) {
  await send(rest[0], Number(rest[1]), rest[2], Number(rest[3]));
} else {
  process.stderr.write("usage: serve <port> <ip>... | send <srcIP> <srcPort> <dstIP> <dstPort>\n");
  process.exit(2);
}
