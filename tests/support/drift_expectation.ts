/**
 * Compares a drift check's expectation with what a fake kernel (tracer.ts FakeIptables) holds: every
 * expected chain exists with the expected rule count, and the per-service chains expected are exactly the
 * per-service nat chains the kernel has. Tests use it to prove that the expectation the agent derives from
 * its render state (drift.ts expectationFromState) is what its payloads left in the kernel.
 */
import { isServiceChainName } from "../../lib/proxy/iptables/chain_names.ts";
import type { DriftExpectation } from "../../lib/proxy/iptables/drift.ts";
import type { FakeIptables } from "./tracer.ts";

/** The differences, one line each; empty when the expectation matches the kernel. */
export function expectationMismatches(exp: DriftExpectation, ipt: FakeIptables): string[] {
  const out: string[] = [];
  const count = (table: string, chain: string) => ipt.rules(table, chain)?.length ?? -1;
  for (const [table, chains] of exp.fixedChains) {
    for (const [chain, n] of chains) {
      if (count(table, chain) !== n) {
        out.push(`${table} ${chain}: kernel ${count(table, chain)}, expected ${n}`);
      }
    }
  }
  const expected = new Set<string>();
  for (const [chain, n] of exp.serviceChains) {
    if (expected.has(chain)) out.push(`nat ${chain} expected twice`);
    expected.add(chain);
    if (count("nat", chain) !== n) out.push(`nat ${chain}: kernel ${count("nat", chain)}, expected ${n}`);
  }
  if (exp.serviceChains.size !== expected.size) {
    out.push(`serviceChains.size ${exp.serviceChains.size}, iterated ${expected.size}`);
  }
  for (const chain of ipt.chains("nat")) {
    if (isServiceChainName(chain) && !expected.has(chain)) {
      out.push(`nat ${chain}: in the kernel, not expected`);
    }
  }
  return out;
}
