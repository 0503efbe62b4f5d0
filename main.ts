/**
 * edgeproxy's entry point: CLI wiring only.
 *
 * citty defines the command (meta, --help via our grouped help, a bare --version); the values are parsed
 * by the pflag-compatible flag table (lib/cli), because kube-proxy's syntax (`--bool=false`, `-v=4`,
 * repeated list flags, Go durations) is not citty's. Then: --help / --version print and exit 0,
 * --write-config-to writes the configuration and exits 0, otherwise the agent runs and its return value is
 * the exit code. Any command-line or configuration error is one line on stderr and exit code 1.
 */
// First, before anything else is evaluated: the one re-exec that sets the engine's options (heap sizing, JIT tiers).
import { ENGINE_OPTIONS_ERROR } from "./lib/runtime/engine_options_boot.ts";
import process from "node:process";
import { type ArgsDef, defineCommand, runMain } from "citty";
import { FLAGS } from "./lib/cli/flags.ts";
import { renderHelp } from "./lib/cli/help.ts";
import { printFlags } from "./lib/cli/print_flags.ts";
import { type Invocation, isUserError, resolveInvocation } from "./lib/cli/resolve.ts";
import { UPSTREAM_KUBE_PROXY_VERSION, VERSION, versionLine } from "./lib/cli/version.ts";
import { applyPlatformDefaults } from "./lib/config/defaults.ts";
import { writeConfigFile } from "./lib/config/write.ts";
import { configureLogging, infoV, log } from "./lib/log.ts";
import { installShutdownSignals } from "./lib/app/shutdown.ts";
import { engineOptionsLogFields } from "./lib/runtime/engine_options.ts";

// First thing, before any I/O: SIGTERM/SIGINT exit 0 from now on; once the agent runs they stop it in
// order, within a bound (lib/app/shutdown.ts).
installShutdownSignals();

/** citty's view of the flags (descriptions only; help and version stay citty built-ins). */
function cittyArgs(): ArgsDef {
  const args: ArgsDef = {};
  for (const f of FLAGS) {
    if (f.name === "help" || f.name === "version") continue;
    args[f.name] = {
      type: f.type === "bool" ? "boolean" : "string",
      description: f.usage,
      ...(f.shorthand && f.shorthand !== f.name ? { alias: f.shorthand } : {}),
    };
  }
  return args;
}

/**
 * Waits until stdout and stderr have handed everything to the OS: Bun drops data still queued for a pipe
 * when process.exit runs (measured: 64 KiB of an 8 MiB write arrive at a slow reader), even after a
 * write callback; ending the streams is what waits. Bounded, in case a stream was already closed.
 */
function flushStdio(): Promise<unknown> {
  const end = (s: NodeJS.WriteStream) =>
    new Promise<void>((resolve) => {
      try {
        s.end(() => resolve());
      } catch {
        resolve();
      }
    });
  const limit = new Promise<void>((resolve) => setTimeout(resolve, 5000));
  return Promise.race([Promise.all([end(process.stdout), end(process.stderr)]), limit]);
}

async function execute(inv: Invocation, argv: readonly string[]): Promise<number> {
  configureLogging({
    verbosity: inv.config.logging.verbosity,
    format: inv.config.logging.format === "json" ? "json" : "text",
  });
  for (const w of inv.warnings) log.warn(w);
  switch (inv.action) {
    case "help":
      process.stdout.write(renderHelp());
      return 0;
    case "version":
      process.stdout.write((inv.versionRaw ? VERSION : versionLine()) + "\n");
      return 0;
    case "write-config":
      printFlags(argv);
      try {
        await writeConfigFile(inv.writeConfigTo, inv.config);
      } catch (e) {
        process.stderr.write(`cannot write ${inv.writeConfigTo}: ${(e as Error).message}\n`);
        return 1;
      }
      log.info("Wrote configuration", { file: inv.writeConfigTo });
      return 0;
    case "run": {
      printFlags(argv);
      if (ENGINE_OPTIONS_ERROR !== null) {
        log.warn(`engine options: ${ENGINE_OPTIONS_ERROR}; the runtime runs with its defaults`);
      } else {
        const fields = engineOptionsLogFields();
        if (fields !== null) infoV(2, "Engine options", fields);
      }
      // Loaded on demand so that --help, --version and --write-config-to stay fast.
      const { runAgent } = await import("./lib/app/agent.ts");
      return await runAgent(applyPlatformDefaults(inv.config), {
        ...inv.options,
        configFile: inv.configFile || undefined,
      }, {
        // Upstream logs this first thing in ProxyServer.Run: after the apiserver client is created (so a
        // kubeconfig error stays the only line), and never for --cleanup and --init-only.
        setupDone: () => {
          if (!inv.options.cleanup && !inv.options.initOnly) {
            log.info("Version info", { version: VERSION, upstream: UPSTREAM_KUBE_PROXY_VERSION });
          }
        },
      });
    }
  }
}

const command = defineCommand({
  meta: {
    name: "edgeproxy",
    // citty prints meta.version verbatim for a bare `--version`; make it the same line as ours.
    version: versionLine(),
    description: "kube-proxy (iptables, nftables or userspace mode) for edge and bare-metal nodes",
  },
  args: cittyArgs(),
  run: ({ rawArgs }) => main(rawArgs),
});

/** Parses, acts and exits; every path of the command line goes through the one pflag-compatible parser. */
async function main(rawArgs: string[]): Promise<never> {
  let code: number;
  try {
    code = await execute(await resolveInvocation(rawArgs), rawArgs);
  } catch (e) {
    const msg = isUserError(e) ? e.message : `edgeproxy: internal error: ${(e as Error)?.stack ?? e}`;
    process.stderr.write(msg + "\n");
    code = 1;
  }
  await flushStdio();
  process.exit(code);
}

const rawArgs = process.argv.slice(2);
await runMain(command, {
  rawArgs,
  // citty answers any "--help"/"-h" word before parsing; parse first, so a syntax error is reported first
  // (`--bogus --help` exits 1) and "--help" as a flag's value (`--config --help`) is that value.
  showUsage: () => main(rawArgs),
});
