/**
 * Runs the test apiserver as its own process, for e2e tests where the agent is a separate process:
 *
 *   ./node_modules/.bin/deno run -A tests/support/apiserver_main.ts --port P --dir D [--seed PATH]
 *     [--token T] [--user token|tokenFile|clientCert] [--history N] [--bookmark-ms N]
 *     [--expired-watch-as status|event]
 *
 * Writes D/kubeconfig, D/ca.crt (plus the other certificates) and D/token, prints one JSON line
 * `{"ready":true,"url":...,"kubeconfig":...}` on stdout, and serves until killed (SIGTERM/SIGINT).
 * `--seed` loads Services/EndpointSlices/Nodes from a manifest file or directory (all Nodes, no filtering).
 *
 * Control channel: one JSON command per stdin line, one JSON answer per stdout line (`{"ok":true,...}` or
 * `{"ok":false,"error":"..."}`). Commands:
 *   {"op":"create"|"update","kind":"services","object":{...}}   {"op":"remove","kind":"nodes","namespace":"","name":"n"}
 *   {"op":"apply","object":{...}}  (create or update, kind taken from the object)
 *   {"op":"list","kind":"services"}  {"op":"rv"}  {"op":"requests"}  {"op":"events"}  {"op":"activeWatches"}
 *   {"op":"fault","name":"dropWatches"|"failNext"|...,"args":[...]}
 */
import { parseArgs } from "node:util";
import { createInterface } from "node:readline";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { type KubeObject, type ResourceKind, startTestApiserver, type TestApiserver } from "./apiserver.ts";
import { parseManifestText } from "../../lib/source/manifests.ts";

const KIND_TO_RESOURCE: Record<string, ResourceKind> = {
  Service: "services",
  EndpointSlice: "endpointslices",
  Node: "nodes",
};

function seedFiles(path: string): string[] {
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path).filter((f) => /\.(ya?ml|json)$/.test(f) && !f.startsWith(".")).sort().map((f) =>
    join(path, f)
  );
}

function apply(server: TestApiserver, obj: KubeObject): KubeObject {
  const kind = KIND_TO_RESOURCE[String(obj.kind)];
  if (!kind) throw new Error(`unsupported kind ${JSON.stringify(obj.kind)}`);
  const name = obj.metadata?.name ?? "";
  const exists = server.list(kind).some((o) =>
    o.metadata?.name === name &&
    (kind === "nodes" || o.metadata?.namespace === (obj.metadata?.namespace ?? "default"))
  );
  return exists ? server.update(kind, obj) : server.create(kind, obj);
}

async function handleCommand(server: TestApiserver, line: string): Promise<unknown> {
  const cmd = JSON.parse(line);
  switch (cmd.op) {
    case "create":
      return { object: server.create(cmd.kind, cmd.object) };
    case "update":
      return { object: server.update(cmd.kind, cmd.object) };
    case "apply":
      return { object: apply(server, cmd.object) };
    case "remove":
      server.remove(cmd.kind, cmd.namespace ?? "", cmd.name);
      return {};
    case "list":
      return { items: server.list(cmd.kind) };
    case "rv":
      return { resourceVersion: server.resourceVersion() };
    case "requests":
      return { requests: server.requests };
    case "events":
      return { events: server.events() };
    case "activeWatches":
      return { activeWatches: server.activeWatches() };
    case "fault": {
      const fn = (server.faults as unknown as Record<string, (...a: unknown[]) => unknown>)[cmd.name];
      if (typeof fn !== "function") throw new Error(`unknown fault ${JSON.stringify(cmd.name)}`);
      await fn(...(cmd.args ?? []));
      return {};
    }
    default:
      throw new Error(`unknown op ${JSON.stringify(cmd.op)}`);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      port: { type: "string", default: "0" },
      dir: { type: "string" },
      token: { type: "string" },
      user: { type: "string", default: "token" },
      history: { type: "string" },
      "bookmark-ms": { type: "string" },
      "expired-watch-as": { type: "string" },
      seed: { type: "string" },
    },
  });
  if (!values.dir) {
    console.error("apiserver_main: --dir is required");
    process.exit(2);
  }
  const user = values.user as "token" | "tokenFile" | "clientCert";
  if (!["token", "tokenFile", "clientCert"].includes(user)) {
    console.error(
      `apiserver_main: --user must be token, tokenFile or clientCert, not ${JSON.stringify(user)}`,
    );
    process.exit(2);
  }
  const server = await startTestApiserver({
    port: Number(values.port),
    tlsDir: values.dir,
    token: values.token,
    historyLimit: values.history ? Number(values.history) : undefined,
    bookmarkIntervalMs: values["bookmark-ms"] ? Number(values["bookmark-ms"]) : undefined,
    expiredWatchAs: values["expired-watch-as"] as "status" | "event" | undefined,
  });
  if (values.seed) {
    for (const f of seedFiles(values.seed)) {
      const parsed = parseManifestText(readFileSync(f, "utf8"), f);
      for (const e of parsed.errors) console.error(e);
      for (const o of parsed.objects) apply(server, o.object as KubeObject);
    }
  }
  const kubeconfig = join(values.dir, "kubeconfig");
  await server.writeKubeconfig(kubeconfig, { user });
  const out = (o: unknown) => process.stdout.write(JSON.stringify(o) + "\n");
  out({
    ready: true,
    url: server.url,
    port: server.port,
    kubeconfig,
    caFile: server.caFile,
    token: server.token,
  });

  const stop = async () => {
    await server.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);

  // Commands run one at a time, in order.
  let queue = Promise.resolve();
  createInterface({ input: process.stdin }).on("line", (line) => {
    if (line.trim() === "") return;
    queue = queue.then(async () => {
      try {
        out({ ok: true, ...(await handleCommand(server, line) as object) });
      } catch (err) {
        out({ ok: false, error: err instanceof Error ? err.message : String(err) });
      }
    });
  });
}

await main();
