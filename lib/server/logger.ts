/**
 * The narrow logger the servers write to; the process logger (lib/log.ts) fits it, and tests hand in a
 * recorder to assert on what was logged.
 */
import { log } from "../log.ts";

/** What the servers log with. */
export interface ServerLogger {
  error(message: string, ...args: unknown[]): void;
  warn(message: string, ...args: unknown[]): void;
  info(message: string, ...args: unknown[]): void;
  debug(message: string, ...args: unknown[]): void;
}

/** The process logger, as a {@link ServerLogger}. */
export const processLogger: ServerLogger = {
  error: (m, ...a) => log.error(m, ...a),
  warn: (m, ...a) => log.warn(m, ...a),
  info: (m, ...a) => log.info(m, ...a),
  debug: (m, ...a) => log.debug(m, ...a),
};
