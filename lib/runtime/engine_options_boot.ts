/**
 * The engine options' re-exec (engine_options.ts), run as this module is evaluated: main.ts imports it
 * first, so the process runs itself again before the rest of the program is even evaluated (~20 ms instead
 * of ~55 ms for the first image). Imported by main.ts only: any other importer would re-execute itself.
 */
import { applyEngineOptions } from "./engine_options.ts";

/** Null when no re-exec was needed; otherwise why it could not run, for main.ts to log. */
export const ENGINE_OPTIONS_ERROR: string | null = applyEngineOptions();
