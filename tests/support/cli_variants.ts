/**
 * The ways the CLI tests start edgeproxy: under `deno run main.ts`, `bun main.ts`, and as the compiled
 * binary (dist/edgeproxy, or $EDGEPROXY_BIN; skipped, saying why, when none has been built).
 */
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** The repository's root. */
export const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/** The compiled binary the tests run. */
export const BINARY = process.env.EDGEPROXY_BIN
  ? resolve(process.env.EDGEPROXY_BIN)
  : join(ROOT, "dist", "edgeproxy");

/** One way to start edgeproxy: `cmd` with `prefix` before edgeproxy's own arguments. */
export interface CliVariant {
  name: string;
  cmd: string;
  prefix: string[];
  /** Why this variant cannot run here, or false. */
  skip: string | false;
}

const ALL: Record<"deno" | "bun" | "compiled", () => CliVariant> = {
  deno: () => ({
    name: "deno run main.ts",
    cmd: join(ROOT, "node_modules/.bin/deno"),
    prefix: ["run", "-A", join(ROOT, "main.ts")],
    skip: false,
  }),
  bun: () => ({
    name: "bun main.ts",
    cmd: join(ROOT, "node_modules/.bin/bun"),
    prefix: [join(ROOT, "main.ts")],
    skip: false,
  }),
  compiled: () => ({
    name: "compiled binary",
    cmd: BINARY,
    prefix: [],
    skip: existsSync(BINARY) ? false : `no compiled binary at ${BINARY} (run "bash compile.sh" first)`,
  }),
};

/** The variants named, in that order. */
export function cliVariants(...kinds: (keyof typeof ALL)[]): CliVariant[] {
  return kinds.map((k) => ALL[k]());
}
