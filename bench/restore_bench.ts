/**
 * iptables-restore of rendered payloads in scratch network namespaces: the floor no proxy can beat.
 * Each measurement gets a fresh namespace (empty tables) that is deleted right after, so runs do not
 * influence each other. Modes:
 *  - plain:   `iptables-restore -w 5 --counters` (no --noflush: the payload's tables are flushed first);
 *  - noflush: `--noflush` with the payload as rendered, one transaction per table (what upstream does);
 *  - split:   `--noflush` with the payload split into bounded transactions (lib/proxy/iptables/restore_plan.ts);
 *  - partial: a one-endpoint-change partial payload as the agent renders it (incremental when render.ts
 *    has that mode) applied with `--noflush` on top of the full ruleset;
 *  - upstream-partial: upstream's partial sync of the next change (rewrites the shared chains), on top.
 * Backends: nf_tables (`iptables-restore`, iptables-nft) and legacy (`iptables-legacy-restore`).
 * Every command has a time limit; a run that hits it is recorded as timed out, not waited for.
 */
import { type Netns, NetnsScope, run } from "../tests/support/netns.ts";
import { round } from "./stats.ts";
import { IPTABLES_JUMP_RULES, jumpRuleLine } from "../lib/proxy/iptables/jump_rules_table.ts";

/** The iptables backends measured. */
export type Backend = "nft" | "legacy";
/** Restore modes (see the module comment). */
export type RestoreMode = "plain" | "noflush" | "split" | "partial" | "upstream-partial";

/** One restore measurement. */
export interface RestoreFigure {
  readonly backend: Backend;
  readonly mode: RestoreMode;
  readonly services: number;
  /** Wall time of the command (ms), or the limit when it timed out. */
  readonly ms: number;
  readonly ok: boolean;
  readonly timedOut: boolean;
  /** Payload bytes handed to the command. */
  readonly bytes: number;
  /** First stderr line on failure ("" on success), or why the run was skipped. */
  readonly note: string;
  /** True when the run was not attempted (e.g. predicted to exceed the limit). */
  readonly skipped?: boolean;
}

/** The binaries of a backend. */
export const RESTORE_BINARY: Record<Backend, string> = {
  nft: "/usr/sbin/iptables-nft-restore",
  legacy: "/usr/sbin/iptables-legacy-restore",
};

/** Why restores cannot be measured here ("" when they can): root, `ip`, both restore binaries. */
export async function restoreUnavailableReason(): Promise<string> {
  if (typeof process.getuid === "function" && process.getuid() !== 0) return "not root";
  const scope = new NetnsScope("bprobe");
  try {
    const ns = await scope.create("p");
    for (const b of Object.values(RESTORE_BINARY)) {
      const r = await ns.exec([b, "--version"], { timeoutMs: 10_000 });
      if (r.code !== 0) return `${b} --version failed in a netns: ${r.stderr.trim()}`;
    }
    return "";
  } catch (e) {
    return `cannot create a network namespace: ${(e as Error).message}`;
  } finally {
    await scope.cleanup();
  }
}

function restoreArgs(backend: Backend, noflush: boolean): string[] {
  return [RESTORE_BINARY[backend], "-w", "5", ...(noflush ? ["--noflush"] : []), "--counters"];
}

async function restoreIn(
  ns: Netns,
  backend: Backend,
  noflush: boolean,
  payload: string,
  timeoutMs: number,
): Promise<{ ms: number; ok: boolean; timedOut: boolean; note: string }> {
  const t0 = performance.now();
  const r = await run([...ns.prefix, ...restoreArgs(backend, noflush)], { input: payload, timeoutMs });
  const ms = performance.now() - t0;
  const timedOut = r.code !== 0 && ms >= timeoutMs - 50;
  const note = r.code === 0
    ? ""
    : timedOut
    ? `killed after the ${timeoutMs} ms limit`
    : (r.stderr.split("\n").find((l) => l.trim() !== "") ?? `exit ${r.code}`).slice(0, 300);
  return { ms: round(timedOut ? timeoutMs : ms), ok: r.code === 0, timedOut, note };
}

/** What to restore for one size. */
export interface RestoreJob {
  readonly services: number;
  readonly fullPayload: string;
  /** Successive partial payloads; [0] is timed on top of the full ruleset, the rest applied untimed. */
  readonly partialPayloads: readonly string[];
  /** Upstream's partial sync, valid after every partialPayloads entry; null: not measured. */
  readonly upstreamPartialPayload: string | null;
  /** null: restore_plan.ts unavailable, split not measured. */
  readonly splitPayload: string | null;
  readonly backends: readonly Backend[];
  /** Modes to measure; "partial" is applied on top of the split (nft) or noflush (legacy) result. */
  readonly modes: readonly RestoreMode[];
  readonly timeoutMs: number;
  /** Modes not to attempt, with the reason recorded instead (e.g. the predicted quadratic trap). */
  readonly skip?: ReadonlyMap<string, string>;
}

/** Key of a backend/mode pair in `RestoreJob.skip`. */
export const skipKey = (backend: Backend, mode: RestoreMode): string => `${backend}/${mode}`;

/** Runs the restores of one job, each in a fresh namespace; the namespaces are always deleted. */
export async function benchRestore(job: RestoreJob, progress: (m: string) => void): Promise<RestoreFigure[]> {
  const out: RestoreFigure[] = [];
  const bytesOf = (s: string) => Buffer.byteLength(s);
  for (const backend of job.backends) {
    // The namespace the partial payload is applied to: the one holding the make-before-break result
    // (nft split, or noflush when split is unavailable or legacy).
    let baseForPartial: { scope: NetnsScope; ns: Netns } | null = null;
    const keepFor: RestoreMode = backend === "nft" && job.splitPayload !== null ? "split" : "noflush";
    try {
      for (const mode of job.modes) {
        if (mode === "partial" || mode === "upstream-partial") continue;
        const payload = mode === "split" ? job.splitPayload : job.fullPayload;
        const skipReason = job.skip?.get(skipKey(backend, mode)) ??
          (mode === "split" && backend === "legacy"
            ? "not measured: restore_plan.ts keeps one transaction per table for legacy"
            : payload === null
            ? "restore_plan.ts unavailable"
            : undefined);
        if (skipReason !== undefined || payload === null) {
          out.push({
            backend,
            mode,
            services: job.services,
            ms: 0,
            ok: false,
            timedOut: false,
            bytes: payload === null ? 0 : bytesOf(payload),
            note: skipReason ?? "",
            skipped: true,
          });
          continue;
        }
        const scope = new NetnsScope("brst");
        let kept = false;
        try {
          const ns = await scope.create(`${backend}-${mode}`);
          const r = await restoreIn(ns, backend, mode !== "plain", payload, job.timeoutMs);
          progress(
            `restore ${backend} ${mode} ${job.services} services: ${
              r.ok ? `${r.ms} ms` : r.timedOut ? `> ${r.ms} ms (timed out)` : `failed: ${r.note}`
            }`,
          );
          out.push({ backend, mode, services: job.services, bytes: bytesOf(payload), ...r });
          if (mode === keepFor && r.ok && job.modes.includes("partial")) {
            await baseForPartial?.scope.cleanup();
            baseForPartial = { scope, ns };
            kept = true;
          }
        } finally {
          if (!kept) await scope.cleanup();
        }
      }
      if (job.modes.includes("partial")) {
        out.push(...await partialRestores(job, backend, baseForPartial?.ns ?? null, keepFor, progress));
      }
    } finally {
      await baseForPartial?.scope.cleanup();
    }
  }
  return out;
}

/** The partial restores of one backend on top of the namespace holding the full ruleset. */
async function partialRestores(
  job: RestoreJob,
  backend: Backend,
  ns: Netns | null,
  keepFor: RestoreMode,
  progress: (m: string) => void,
): Promise<RestoreFigure[]> {
  const out: RestoreFigure[] = [];
  const base = { backend, services: job.services, ok: false, timedOut: false, ms: 0 };
  const first = job.partialPayloads[0] ?? "";
  if (ns === null) {
    const note = `not measured: no successful ${keepFor} restore to apply it on`;
    out.push({ ...base, mode: "partial", bytes: Buffer.byteLength(first), note, skipped: true });
    return out;
  }
  // The agent's namespace also holds the jumps from the built-in chains (PREROUTING, OUTPUT, …): without
  // them nf_tables never walks KUBE-SERVICES when it validates a commit, and a partial restore looks 5×
  // cheaper than it is in a real node (bench/README.md, change latency).
  const jumps = await restoreIn(ns, backend, true, baseJumpRulesPayload(), job.timeoutMs);
  if (!jumps.ok) {
    const note = `not measured: the base jump rules did not restore: ${jumps.note}`;
    out.push({ ...base, mode: "partial", bytes: Buffer.byteLength(first), note, skipped: true });
    return out;
  }
  const r = await restoreIn(ns, backend, true, first, job.timeoutMs);
  progress(`restore ${backend} partial ${job.services} services: ${r.ok ? `${r.ms} ms` : r.note}`);
  out.push({ ...base, mode: "partial", bytes: Buffer.byteLength(first), ...r });
  if (!r.ok || job.upstreamPartialPayload === null) return out;
  for (const p of job.partialPayloads.slice(1)) {
    const x = await restoreIn(ns, backend, true, p, job.timeoutMs);
    if (!x.ok) {
      out.push({
        ...base,
        mode: "upstream-partial",
        bytes: 0,
        note: `not measured: an earlier partial payload failed: ${x.note}`,
        skipped: true,
      });
      return out;
    }
  }
  const u = await restoreIn(ns, backend, true, job.upstreamPartialPayload, job.timeoutMs);
  progress(`restore ${backend} upstream-partial ${job.services} services: ${u.ok ? `${u.ms} ms` : u.note}`);
  out.push({ ...base, mode: "upstream-partial", bytes: Buffer.byteLength(job.upstreamPartialPayload), ...u });
  return out;
}

/** kube-proxy's jump rules from the built-in chains (what the agent installs after its full sync). */
export function baseJumpRulesPayload(): string {
  const lines: string[] = [];
  for (const table of ["filter", "nat"] as const) {
    lines.push(`*${table}`);
    for (const rule of IPTABLES_JUMP_RULES) if (rule.table === table) lines.push(jumpRuleLine(rule));
    lines.push("COMMIT");
  }
  return lines.join("\n") + "\n";
}

/**
 * Predicted time (ms) of a run at `n` Services from measured (n, ms) points of the same backend/mode,
 * by the fitted power law; null with fewer than two points.
 */
export function predictMs(points: ReadonlyArray<readonly [number, number]>, n: number): number | null {
  const p = points.filter(([x, y]) => x > 0 && y > 0);
  if (p.length < 2) return null;
  const lx = p.map(([x]) => Math.log(x));
  const ly = p.map(([, y]) => Math.log(y));
  const mx = lx.reduce((a, b) => a + b, 0) / p.length;
  const my = ly.reduce((a, b) => a + b, 0) / p.length;
  let num = 0;
  let den = 0;
  for (let i = 0; i < p.length; i++) {
    num += (lx[i] - mx) * (ly[i] - my);
    den += (lx[i] - mx) ** 2;
  }
  if (den === 0) return null;
  const k = num / den;
  return Math.exp(my + k * (Math.log(n) - mx));
}
