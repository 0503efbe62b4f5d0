/**
 * The resolved apiserver connection: what the kubeconfig loader, the in-cluster configuration and
 * --master produce (lib/k8s/kubeconfig.ts) and the transport consumes (lib/k8s/transport.ts).
 */
import type { Credentials } from "./credentials.ts";

/** Everything needed to talk to one apiserver. */
export interface RestConfig {
  /** Base URL, without trailing slash (may carry a path prefix). */
  server: string;
  /** Cluster CA (PEM), if any. */
  caPem?: string;
  /** kubeconfig insecure-skip-tls-verify. */
  insecureSkipTlsVerify: boolean;
  credentials: Credentials;
  /** Where this came from, for logs: "kubeconfig /a (context c)", "in-cluster", "--master". */
  source: string;
}
