/**
 * Bearer tokens read from a file (kubeconfig `tokenFile`, the in-cluster service-account token) and
 * re-read periodically, as client-go does, so rotated projected tokens are used without a restart.
 */
import { readFile } from "node:fs/promises";
import type { AuthMaterial, Credentials } from "./credentials.ts";
import { KubeconfigError } from "./kubeconfig_error.ts";
import { fileProblem } from "./kubeconfig_fields.ts";

/** How token files are re-read; both are for tests or tuning. */
export interface TokenRefreshOptions {
  /** How often token files are re-read (ms, default 60 000), so rotated bound tokens are picked up. */
  tokenRefreshMs?: number;
  /** Clock in ms (tests). */
  now?: () => number;
}

/**
 * A bearer token read from a file and re-read every `refreshMs` (and after a 401), so rotated projected
 * service-account tokens are used without a restart. A failed re-read keeps the last good token.
 */
export class FileTokenCredentials implements Credentials {
  readonly description: string;
  readonly #path: string;
  readonly #base: AuthMaterial;
  readonly #refreshMs: number;
  readonly #now: () => number;
  readonly #origin: string;
  #token = "";
  #readAt = Number.NEGATIVE_INFINITY;
  #pending: Promise<AuthMaterial> | null = null;

  /** `origin` names the setting in error messages. */
  constructor(path: string, base: AuthMaterial, refreshMs = 60_000, now = () => Date.now(), origin = path) {
    this.#path = path;
    this.#base = base;
    this.#refreshMs = refreshMs;
    this.#now = now;
    this.#origin = origin;
    this.description = `token file ${path}`;
  }

  /** See {@link Credentials.get}. */
  get(): Promise<AuthMaterial> {
    if (this.#token && this.#now() - this.#readAt < this.#refreshMs) {
      return Promise.resolve({ ...this.#base, authorization: `Bearer ${this.#token}` });
    }
    this.#pending ??= this.#read().finally(() => (this.#pending = null));
    return this.#pending;
  }

  async #read(): Promise<AuthMaterial> {
    try {
      const t = (await readFile(this.#path, "utf8")).trim();
      if (!t) throw new Error("file is empty");
      this.#token = t;
    } catch (e) {
      if (!this.#token) {
        const problem = e instanceof Error && e.message === "file is empty"
          ? "file is empty"
          : fileProblem(e);
        throw new KubeconfigError(this.#origin, "", `${this.#path}: ${problem}`);
      }
      // keep the previous token; the next get() after refreshMs tries again
    }
    this.#readAt = this.#now();
    return { ...this.#base, authorization: `Bearer ${this.#token}` };
  }

  /** See {@link Credentials.invalidate}. */
  invalidate(): void {
    this.#readAt = Number.NEGATIVE_INFINITY;
  }
}
