/**
 * component-base's `kubernetes_build_info` gauge (component-base/metrics/version.go), which every Kubernetes
 * component registers and dashboards join on. Its labels come from a Go build; edgeproxy fills them with
 * what is true of this binary:
 * - `git_version` "v" + the package version, `major`/`minor` its first two numbers;
 * - `git_commit` "", `git_tree_state` "" and `build_date` "1970-01-01T00:00:00Z": the values component-base
 *   reports for a build that did not stamp them (our build does not);
 * - `go_version` the JavaScript runtime and its version (e.g. "bun1.4.5"), `compiler` the runtime name
 *   ("bun", "deno", "node"), `platform` Go's GOOS/GOARCH spelling of the host (e.g. "linux/amd64").
 */
import { VERSION } from "../cli/version.ts";
import { runtimeName } from "../runtime/fetch_tls.ts";
import type { Gauge, Registry } from "./registry.ts";

/** The label values of kubernetes_build_info. */
export interface BuildInfo {
  readonly major: string;
  readonly minor: string;
  readonly git_version: string;
  readonly git_commit: string;
  readonly git_tree_state: string;
  readonly build_date: string;
  readonly go_version: string;
  readonly compiler: string;
  readonly platform: string;
}

/** Node's `process.arch` in Go's GOARCH spelling. */
export function goArch(arch: string): string {
  switch (arch) {
    case "x64":
      return "amd64";
    case "ia32":
      return "386";
    default:
      return arch;
  }
}

/** The build info of this process (see the module comment for where each value comes from). */
export function currentBuildInfo(version: string = VERSION): BuildInfo {
  const [major = "", minor = ""] = version.split(".");
  const runtimeVersion = (process.versions as Record<string, string | undefined>)[runtimeName] ?? "";
  return {
    major,
    minor,
    git_version: `v${version}`,
    git_commit: "",
    git_tree_state: "",
    build_date: "1970-01-01T00:00:00Z",
    go_version: `${runtimeName}${runtimeVersion.replace(/^v/, "")}`,
    compiler: runtimeName,
    platform: `${process.platform}/${goArch(process.arch)}`,
  };
}

/** Registers kubernetes_build_info with the single series `info` = 1. */
export function registerBuildInfo(registry: Registry, info: BuildInfo = currentBuildInfo()): Gauge {
  const g = registry.gauge({
    name: "kubernetes_build_info",
    help:
      "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
    labelNames: [
      "major",
      "minor",
      "git_version",
      "git_commit",
      "git_tree_state",
      "build_date",
      "go_version",
      "compiler",
      "platform",
    ],
    stabilityLevel: "BETA",
  });
  g.set({ ...info }, 1);
  return g;
}
