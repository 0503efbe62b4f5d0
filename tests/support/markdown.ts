/**
 * Reading the shell recipes out of a Markdown document, so tests can run or check what the README tells
 * an operator to type.
 */

/**
 * The ```sh blocks of the section under `heading` (e.g. "## Install"), up to the next heading of any level
 * (a `#` line inside a code block is a shell comment, not a heading).
 */
export function sectionShellBlocks(markdown: string, heading: string): string[] {
  const blocks: string[] = [];
  let inSection = false;
  let fence: string[] | null = null;
  let fenceIsSh = false;
  for (const line of markdown.split("\n")) {
    if (fence !== null) {
      if (line.startsWith("```")) {
        if (inSection && fenceIsSh) blocks.push(fence.join("\n") + "\n");
        fence = null;
      } else fence.push(line);
    } else if (line.startsWith("```")) {
      fence = [];
      fenceIsSh = line.trim() === "```sh";
    } else if (/^#{1,6} /.test(line)) {
      inSection = line === heading;
    }
  }
  return blocks;
}
