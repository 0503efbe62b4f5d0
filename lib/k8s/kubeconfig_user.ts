/**
 * A kubeconfig user entry turned into {@link Credentials}: client certificate and key, exec plugin, bearer
 * token, `tokenFile` (re-read), basic auth. What our transport cannot honour (impersonation, legacy
 * auth-providers) is refused, naming the field.
 */
import { Buffer } from "node:buffer";
import type { User } from "@kubernetes/client-node/dist/config_types.js";
import { type AuthMaterial, type Credentials, staticCredentials } from "./credentials.ts";
import { type ExecConfig, ExecCredentialProvider } from "./exec_credential.ts";
import { KubeconfigError } from "./kubeconfig_error.ts";
import { isRecord, pem, resolveRelative, str } from "./kubeconfig_fields.ts";
import type { Origin } from "./kubeconfig_merge.ts";
import { FileTokenCredentials, type TokenRefreshOptions } from "./token_file_credentials.ts";

/**
 * The credentials of `user`, whose entry is at `at`; `cluster` is what an exec plugin may be told
 * (provideClusterInfo).
 * @throws KubeconfigError naming the file and the field
 */
export async function credentialsFromUser(
  user: User,
  at: Origin & { tokenFile?: string },
  cluster: { server: string; caPem?: string; insecure: boolean },
  opts: TokenRefreshOptions,
): Promise<Credentials> {
  const where = `kubeconfig ${at.file}`;
  const f = (name: string) => `${at.field}.${name}`;
  const certPem = pem(where, f("client-certificate"), user.certFile, user.certData);
  const keyPem = pem(where, f("client-key"), user.keyFile, user.keyData);
  if (certPem && !keyPem) {
    throw new KubeconfigError(where, f("client-key"), "missing (client-certificate is set)");
  }
  if (keyPem && !certPem) {
    throw new KubeconfigError(where, f("client-certificate"), "missing (client-key is set)");
  }
  if (user.impersonateUser) throw new KubeconfigError(where, f("as"), "not supported by edgeproxy");
  const base: AuthMaterial = { certPem, keyPem };

  if (user.exec !== undefined && user.exec !== null) {
    // Our exec runner, not client-node's ExecAuth: that one spawns with no timeout, in our process group,
    // with stdin open, and cannot be killed, so a hanging plugin would wedge startup and shutdown.
    return new ExecCredentialProvider(parseExecConfig(user.exec, at.file, f("exec")), {
      cluster: { server: cluster.server, caPem: cluster.caPem, insecureSkipTlsVerify: cluster.insecure },
      fallback: base,
      now: opts.now,
    });
  }
  if (user.authProvider) {
    // Legacy auth-providers: gcp and azure were removed from client-go (v1.26); oidc would need
    // client-node's KubeConfig (openid-client), whose module graph alone costs ~4 MiB of resident memory
    // and ~4 MB of binary even when unused. An exec plugin (e.g. kubelogin) does the same job.
    const name = (user.authProvider as { name?: unknown }).name;
    throw new KubeconfigError(
      where,
      f("auth-provider"),
      `${JSON.stringify(name ?? "")}: legacy auth providers are not supported; use an exec plugin`,
    );
  }
  if (user.token) {
    return staticCredentials({ ...base, authorization: `Bearer ${user.token.trim()}` }, "bearer token");
  }
  if (at.tokenFile) {
    // Our re-reader, not client-node's FileAuth: that one reads synchronously, loses the token when a
    // rotation briefly leaves no file, and keeps the trailing newline.
    const src = new FileTokenCredentials(
      at.tokenFile,
      base,
      opts.tokenRefreshMs,
      opts.now,
      `${where}: ${f("tokenFile")}`,
    );
    await src.get(); // fail now, naming the field, if the file is unreadable
    return src;
  }
  if (user.username || user.password) {
    const basic = Buffer.from(`${user.username ?? ""}:${user.password ?? ""}`).toString("base64");
    return staticCredentials({ ...base, authorization: `Basic ${basic}` }, "basic auth");
  }
  return staticCredentials(base, certPem ? "client certificate" : "none");
}

function parseExecConfig(v: unknown, file: string, field: string): ExecConfig {
  const where = `kubeconfig ${file}`;
  if (!isRecord(v)) throw new KubeconfigError(where, field, "must be a mapping");
  const s = (k: string) => str(v, k, where, `${field}.${k}`);
  const command = s("command");
  if (!command) throw new KubeconfigError(where, `${field}.command`, "missing");
  const apiVersion = s("apiVersion") ?? "";
  if (
    apiVersion !== "client.authentication.k8s.io/v1" && apiVersion !== "client.authentication.k8s.io/v1beta1"
  ) {
    throw new KubeconfigError(
      where,
      `${field}.apiVersion`,
      `"${apiVersion}" is not supported (use client.authentication.k8s.io/v1 or v1beta1)`,
    );
  }
  const args = v.args ?? [];
  if (!Array.isArray(args) || args.some((a) => typeof a !== "string")) {
    throw new KubeconfigError(where, `${field}.args`, "must be a list of strings");
  }
  const env: Record<string, string> = {};
  const envList = v.env ?? [];
  if (!Array.isArray(envList)) throw new KubeconfigError(where, `${field}.env`, "must be a list");
  envList.forEach((e, i) => {
    if (!isRecord(e) || typeof e.name !== "string" || typeof (e.value ?? "") !== "string") {
      throw new KubeconfigError(where, `${field}.env[${i}]`, "must have string name and value");
    }
    env[e.name] = String(e.value ?? "");
  });
  if (s("interactiveMode") === "Always") {
    throw new KubeconfigError(
      where,
      `${field}.interactiveMode`,
      "Always needs a terminal; edgeproxy runs unattended",
    );
  }
  // client-go: a command with a slash is relative to the kubeconfig's directory; a bare name is looked up
  // in PATH (client-node's makePathsAbsolute leaves exec commands alone).
  const cmd = command.includes("/") ? resolveRelative(command, file) : command;
  return {
    command: cmd,
    args: args as string[],
    env,
    apiVersion,
    provideClusterInfo: v.provideClusterInfo === true,
    installHint: s("installHint"),
    origin: `${where}: ${field}`,
  };
}
