/**
 * Reading kubeconfig values, shared by the kubeconfig loader, the user-credentials resolver and the
 * in-cluster configuration: PEMs from `<field>-data` or a file, paths relative to their kubeconfig, server
 * URLs, and one-line file problems. Every problem is a {@link KubeconfigError} naming the file and field.
 */
import { readFileSync } from "node:fs";
import { dirname, isAbsolute, resolve } from "node:path";
import { Buffer } from "node:buffer";
import { KubeconfigError } from "./kubeconfig_error.ts";

/** A YAML mapping (not null, not a list). */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The first line of an error's message, for one-line problems. */
export function firstLine(e: unknown): string {
  return String((e as Error)?.message ?? e).split("\n")[0];
}

/** The string at `o[key]`, undefined when absent. */
export function str(
  o: Record<string, unknown>,
  key: string,
  where: string,
  field: string,
): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw new KubeconfigError(where, field, "must be a string");
  return v;
}

/** `p` resolved against the directory of the kubeconfig that names it. */
export function resolveRelative(p: string, kubeconfigFile: string): string {
  return isAbsolute(p) ? p : resolve(dirname(kubeconfigFile), p);
}

/** A file error in a few words ("file not found", "permission denied", …). */
export function fileProblem(e: unknown): string {
  const code = (e as NodeJS.ErrnoException)?.code;
  if (code === "ENOENT") return "file not found";
  if (code === "EACCES" || code === "EPERM") return "permission denied";
  if (code === "EISDIR") return "is a directory";
  return firstLine(e);
}

/**
 * A PEM from `<field>-data` (base64) or the file `<field>` (already absolute): the data wins, as in
 * client-go (client-node's bufferFromFileOrString prefers the file, so it gets one of them only).
 */
export function pem(
  where: string,
  field: string,
  file: string | undefined,
  data: string | undefined,
): string | undefined {
  const dataField = field ? `${field}-data` : "";
  let buf: Buffer | null;
  try {
    buf = data ? Buffer.from(data.replace(/\s+/g, ""), "base64") : file ? readFileSync(file) : null;
  } catch (e) {
    throw new KubeconfigError(where, field, `${fileProblem(e)} (${file})`);
  }
  if (!buf) return undefined;
  const text = buf.toString("utf8");
  if (!text.includes("-----BEGIN ")) {
    throw data
      ? new KubeconfigError(where, dataField, "not base64-encoded PEM")
      : new KubeconfigError(where, field, `not PEM (${file})`);
  }
  return text;
}

/** The apiserver URL without trailing slash; https:// when no scheme is given. */
export function normalizeServer(server: string, where: string, field: string): string {
  let url: URL;
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(server) ? server : `https://${server}`;
  try {
    url = new URL(withScheme);
  } catch {
    throw new KubeconfigError(where, field, `"${server}" is not a URL`);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new KubeconfigError(where, field, `"${server}": scheme must be https or http`);
  }
  return url.toString().replace(/\/+$/, "");
}
