/**
 * Process-wide logger. lib/log.ts is the only place that knows about consola; the rest of the code
 * calls `log.info(...)` etc. Configure once at start with `configureLogging`.
 * (Placeholder until the foundation work lands its full version: same exports.)
 */
import { createConsola } from "consola";

/** The logger every module imports. */
export const log = createConsola({ level: 3 });
