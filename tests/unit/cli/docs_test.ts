import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { FLAGS } from "../../../lib/cli/flags.ts";

const DOC = readFileSync(new URL("../../../docs/flags.md", import.meta.url), "utf8");

/** The table row documenting a flag in docs/flags.md, if any. */
function row(name: string, shorthand?: string): string | undefined {
  const cell = shorthand ? `\`-${shorthand}, --${name}\`` : `\`--${name}\``;
  return DOC.split("\n").find((l) => l.startsWith(`| ${cell} `) && /^\|[^|]+\|/.test(l));
}

describe("docs/flags.md", () => {
  for (const f of FLAGS) {
    it(`documents --${f.name} with the right status`, () => {
      const r = row(f.name, f.shorthand);
      assert.ok(r, `no table row for --${f.name}`);
      if (f.configPath !== undefined && !f.deprecated) assert.ok(r.includes(`\`${f.configPath}\``), r);
      if (f.scope !== "process" && f.configPath !== undefined) {
        assert.match(r, new RegExp(`\\|\\s*${f.scope}\\s*\\|`), r);
      }
      assert.equal(/no effect/.test(r), !f.effective, r);
      if (f.deprecated) assert.match(r, /deprecated/);
    });
  }
});
