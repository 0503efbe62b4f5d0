/**
 * The credentials contract between the kubeconfig loader, the credential sources (token files, exec
 * plugins) and the transport that attaches them to each request; and the credentials that never change.
 */

/** What one request needs to authenticate: a header value and/or a client certificate. */
export interface AuthMaterial {
  /** Full Authorization header value ("Bearer …" or "Basic …"). */
  authorization?: string;
  /** Client certificate chain (PEM). */
  certPem?: string;
  /** Client key (PEM). */
  keyPem?: string;
}

/** A source of credentials that may change over time (rotated token files, exec plugins). */
export interface Credentials {
  /** The material for the next request (cached; cheap to call per request). */
  get(): Promise<AuthMaterial>;
  /** The apiserver answered 401: forget cached material so the next get() re-reads or re-runs. */
  invalidate(): void;
  /**
   * Shutdown: kill anything still running for these credentials (an exec plugin's process group); a
   * pending and every later get() rejects. Optional: static credentials have nothing to stop.
   */
  close?(): void;
  /** What kind of credentials these are, for logs (never the secret itself). */
  readonly description: string;
}

/** Credentials that never change. */
export function staticCredentials(m: AuthMaterial, description: string): Credentials {
  const frozen = { ...m };
  return { get: () => Promise.resolve(frozen), invalidate: () => {}, description };
}
