/**
 * What a later full sync (the hourly one, a drift repair) costs the kernel in nftables mode, one transaction
 * (upstream's way) against the bounded make-before-break sequence the backend sends: a first sync is
 * applied as bounded transactions through the netlink writer into a scratch namespace, then the same
 * cluster's full sync over that table (not the first: base chains kept) is applied both ways, bounded
 * first. Prints wall time per way (and the system CPU of the single transaction: the kernel's commit);
 * figures only. Needs root, nft and Bun:
 *
 *   ./node_modules/.bin/bun bench/nftables_later_full_sync.ts [services, 5000] [both|bounded|single]
 *
 * The single transaction grows with the square of the table (every anonymous map is made anew, each a
 * walk of the table's sets): 2000 Services ~12 s, 5000 ~92 s here; 10000 is likely minutes.
 */
import process from "node:process";
import { NetnsScope } from "../tests/support/netns.ts";
import { openNftSession } from "../lib/proxy/nftables/nft_session.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel } from "./cluster_model.ts";
import { nftRenderInputFor } from "./nftables_model.ts";
import { NftIncrementalRenderer } from "../lib/proxy/nftables/render/incremental.ts";
import { splitNFTablesFullSync } from "../lib/proxy/nftables/render/incremental_first_sync.ts";

const size = Number(process.argv[2] ?? "5000");
const scope = new NetnsScope("nftlfs");
try {
  const cluster = syntheticCluster({ services: size });
  const model = buildClusterModel(cluster);
  const base = nftRenderInputFor(model);
  const inc = new NftIncrementalRenderer();
  const first = inc.sync({ ...base, services: model.services }, null);
  const parts = splitNFTablesFullSync(first.transaction, {});
  const ns = await scope.create(`h${size}`);
  const s = await openNftSession({
    commandPrefix: ns.prefix,
    netnsPath: `/var/run/netns/${ns.name}`,
    netlink: true,
    libnftables: false,
    timeoutMs: 900_000,
  });
  let t = performance.now();
  for (const p of parts) await s.run(p);
  console.log(`${size}: first sync bounded ${parts.length} tx ${Math.round(performance.now() - t)} ms`);
  // A later full sync over the table as it is (the hourly one): same model, not the first sync.
  const inc2 = new NftIncrementalRenderer();
  const again = inc2.sync({
    ...base,
    services: model.services,
    firstSync: false,
    existingChains: [],
    existingSets: [],
  }, null);
  const mode = process.argv[3] ?? "both";
  if (mode !== "single") {
    const bparts = splitNFTablesFullSync(again.transaction, { existingServicePorts: model.services.size });
    const times: number[] = [];
    for (const p of bparts) {
      const t0 = performance.now();
      await s.run(p);
      times.push(performance.now() - t0);
    }
    console.log(
      `${size}: later full sync bounded ${bparts.length} tx total ${
        Math.round(times.reduce((a, b) => a + b, 0))
      } ms max ${Math.round(Math.max(...times))} ms`,
    );
  }
  if (mode !== "bounded") {
    const c0 = process.cpuUsage();
    t = performance.now();
    await s.run(again.transaction);
    const c = process.cpuUsage(c0);
    console.log(
      `${size}: later full sync one transaction ${Math.round(performance.now() - t)} ms (system ${
        Math.round(c.system / 1000)
      } ms), ${(again.transaction.length / 1e6).toFixed(1)} MB`,
    );
  }
  await s.close();
} finally {
  await scope.cleanup();
}
