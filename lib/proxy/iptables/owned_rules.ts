/**
 * What we believe the kernel holds in the chains we own, per table: chain → rule count. Maintained from
 * the restore payloads we applied (a declared chain is flushed and refilled by the payload's `-A` lines,
 * `-X` deletes it, undeclared chains keep their rules under --noflush), so drift detection can compare it
 * with iptables-save without keeping any rule text.
 */

/** Chain → number of rules, per table. */
export type OwnedRules = Map<string, Map<string, number>>;

/**
 * Applies a restore payload to `owned` (mutates it). The payload is one string or chunks of whole lines
 * (no line spans two chunks, as RenderResult.payloadChunks), read without joining them. Single pass over
 * the text, no per-line regex.
 */
export function applyPayloadToOwnedRules(owned: OwnedRules, payload: string | readonly string[]): void {
  versions.set(owned, ownedRulesVersion(owned) + 1);
  let table: Map<string, number> | null = null;
  for (const chunk of typeof payload === "string" ? [payload] : payload) {
    table = applyChunk(owned, chunk, table);
  }
}

const versions = new WeakMap<OwnedRules, number>();

/**
 * How many payloads were applied to `owned` (0 for a new one): lets readers cache what they derive from
 * it (the drift check's sorted chain names) until it changes.
 */
export function ownedRulesVersion(owned: OwnedRules): number {
  return versions.get(owned) ?? 0;
}

/** One chunk; returns the table the chunk ended in (a "*table" section may span chunks). */
function applyChunk(
  owned: OwnedRules,
  payload: string,
  current: Map<string, number> | null,
): Map<string, number> | null {
  let table = current;
  let start = 0;
  const len = payload.length;
  while (start < len) {
    let end = payload.indexOf("\n", start);
    if (end < 0) end = len;
    const c = payload.charCodeAt(start);
    if (c === 42 /* * */) {
      const name = payload.slice(start + 1, end).trim();
      table = owned.get(name) ?? new Map();
      owned.set(name, table);
    } else if (table !== null) {
      if (c === 58 /* : */) {
        const sp = payload.indexOf(" ", start);
        table.set(payload.slice(start + 1, sp < 0 || sp > end ? end : sp), 0);
      } else if (c === 45 /* - */ && payload.charCodeAt(start + 2) === 32) {
        const op = payload.charCodeAt(start + 1);
        const sp = payload.indexOf(" ", start + 3);
        const chain = payload.slice(start + 3, sp < 0 || sp > end ? end : sp);
        if (op === 65 /* A */ || op === 73 /* I */) table.set(chain, (table.get(chain) ?? 0) + 1);
        else if (op === 68 /* D */) table.set(chain, Math.max(0, (table.get(chain) ?? 1) - 1));
        else if (op === 88 /* X */) table.delete(chain);
        else if (op === 70 /* F */) table.set(chain, 0);
      }
    }
    start = end + 1;
  }
  return table;
}
