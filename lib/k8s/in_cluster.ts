/**
 * The in-cluster configuration (client-go's rest.InClusterConfig): the apiserver from the pod's
 * KUBERNETES_SERVICE_HOST/PORT, the service-account token (re-read) and CA.
 */
import process from "node:process";
import { KubeconfigError } from "./kubeconfig_error.ts";
import { pem } from "./kubeconfig_fields.ts";
import type { RestConfig } from "./rest_config.ts";
import { FileTokenCredentials, type TokenRefreshOptions } from "./token_file_credentials.ts";
import { joinHostPort } from "../net/go_net.ts";

/** Inputs of {@link inClusterConfig}. */
export interface InClusterOptions extends TokenRefreshOptions {
  /** Prefix of the service-account mount path (default "": /var/run/secrets/kubernetes.io/serviceaccount). */
  inClusterRoot?: string;
}

/** Default service-account mount. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/**
 * The in-cluster configuration (rest.InClusterConfig): service host/port from process.env, the
 * service-account token (re-read, see {@link FileTokenCredentials}) and CA.
 */
export async function inClusterConfig(
  opts: InClusterOptions = {},
): Promise<RestConfig> {
  const where = "in-cluster configuration";
  const host = process.env.KUBERNETES_SERVICE_HOST ?? "";
  const port = process.env.KUBERNETES_SERVICE_PORT ?? "";
  if (!host || !port) {
    throw new KubeconfigError(
      "no apiserver configured",
      "",
      "give --kubeconfig or --master, set KUBECONFIG, or run in a pod " +
        "(in-cluster configuration needs KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT)",
    );
  }
  const dir = `${opts.inClusterRoot ?? ""}${SERVICE_ACCOUNT_DIR}`;
  const tokenPath = `${dir}/token`;
  // client-go continues without a CA (and fails TLS later); say so now instead.
  const caPem = pem(where, "", `${dir}/ca.crt`, undefined);
  const credentials = new FileTokenCredentials(tokenPath, {}, opts.tokenRefreshMs, opts.now, where);
  await credentials.get();
  return {
    server: `https://${joinHostPort(host, port)}`, // client-go: net.JoinHostPort
    caPem,
    insecureSkipTlsVerify: false,
    credentials,
    source: `in-cluster (${dir})`,
  };
}
