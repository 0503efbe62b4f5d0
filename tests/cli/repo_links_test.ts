/**
 * A clone is self-contained: the README, docs/, source comments and the shipped scripts name no file
 * outside the repository (no `../shared/...`, no absolute paths of a work machine, no section numbers of
 * notes a clone does not have), and every relative Markdown link in README.md, CHANGELOG.md and docs/
 * leads to a file of the repository.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));

/** Files a clone ships to operators and readers. */
function productFiles(): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(join(ROOT, dir)).flatMap((name) => {
      const rel = join(dir, name);
      return statSync(join(ROOT, rel)).isDirectory() ? walk(rel) : [rel];
    });
  return [
    "README.md",
    "CHANGELOG.md",
    "main.ts",
    "compile.sh",
    ...walk("lib"),
    ...walk("docs"),
    ...walk("systemd"),
    ...walk("scripts"),
  ];
}

const OUTSIDE = [
  /\.\.\/shared\b/,
  /\/work\//,
  /\bshared\/(research|design)\b/,
  /\bresearch (notes )?§/i,
  /§\s*[0-9]/,
];

describe("the repository stands alone", () => {
  it("no product file points at notes outside the repository", () => {
    const hits: string[] = [];
    for (const file of productFiles()) {
      readFileSync(join(ROOT, file), "utf8").split("\n").forEach((line, i) => {
        if (OUTSIDE.some((re) => re.test(line))) hits.push(`${file}:${i + 1}: ${line.trim()}`);
      });
    }
    assert.deepEqual(hits, []);
  });

  it("every relative Markdown link leads to a file in the repository", () => {
    const docs = productFiles().filter((f) => f.endsWith(".md"));
    assert.ok(docs.includes("docs/architecture.md"));
    const broken: string[] = [];
    for (const file of docs) {
      const text = readFileSync(join(ROOT, file), "utf8");
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1].split("#")[0];
        if (target === "" || /^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // anchors, URLs
        const abs = resolve(dirname(join(ROOT, file)), target);
        const inside = !relative(ROOT, abs).startsWith("..");
        if (!inside || !existsSync(abs)) broken.push(`${file}: ${m[1]}`);
      }
    }
    assert.deepEqual(broken, []);
  });

  it("the README's Layout section links the architecture page", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const layout = readme.slice(readme.indexOf("\n## Layout\n"));
    assert.match(layout.split(/\n## (?!Layout)/)[0], /\]\(docs\/architecture\.md\)/);
  });
});
