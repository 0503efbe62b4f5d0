/**
 * Test PKI for the test apiserver: a CA, a server certificate for 127.0.0.1 / localhost / ::1 and a client
 * certificate (CN=system:kube-proxy, O=system:node-proxier) signed by the same CA, made with the `openssl`
 * CLI. ECDSA P-256 keeps generation fast; extensions are set explicitly because rustls (Deno's fetch)
 * rejects leaf certificates without subjectAltName and CAs without basicConstraints.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Paths and PEM contents of the generated test PKI. */
export interface TestCerts {
  /** Directory holding every file below. */
  dir: string;
  caFile: string;
  caKeyFile: string;
  serverCertFile: string;
  serverKeyFile: string;
  clientCertFile: string;
  clientKeyFile: string;
  caPem: string;
  serverCertPem: string;
  serverKeyPem: string;
  clientCertPem: string;
  clientKeyPem: string;
}

/** Common name of the generated client certificate (the identity kube-proxy uses). */
export const CLIENT_CERT_CN = "system:kube-proxy";

function openssl(args: string[], cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile("openssl", args, { cwd }, (err, _stdout, stderr) => {
      if (err) reject(new Error(`openssl ${args.slice(0, 2).join(" ")} failed: ${String(stderr).trim()}`));
      else resolve();
    });
  });
}

const FILES = {
  caFile: "ca.crt",
  caKeyFile: "ca.key",
  serverCertFile: "server.crt",
  serverKeyFile: "server.key",
  clientCertFile: "client.crt",
  clientKeyFile: "client.key",
} as const;

async function issue(
  dir: string,
  name: string,
  subject: string,
  extensions: string,
): Promise<void> {
  await openssl(
    [
      "req",
      "-new",
      "-nodes",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
      "-subj",
      subject,
    ],
    dir,
  );
  await writeFile(join(dir, `${name}.ext`), extensions);
  await openssl(
    [
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.crt",
      "-CAkey",
      "ca.key",
      "-set_serial",
      `0x${
        crypto.getRandomValues(new Uint8Array(8)).reduce((s, b) => s + b.toString(16).padStart(2, "0"), "")
      }`,
      "-days",
      "3650",
      "-sha256",
      "-extfile",
      `${name}.ext`,
      "-out",
      `${name}.crt`,
    ],
    dir,
  );
  await rm(join(dir, `${name}.csr`), { force: true });
  await rm(join(dir, `${name}.ext`), { force: true });
}

/**
 * Issues one more client certificate signed by the test CA in `certs.dir` (e.g. a wrong CN, to check that
 * the server requires CN=system:kube-proxy). Returns the PEMs.
 */
export async function issueClientCert(
  certs: TestCerts,
  cn: string,
  name = "client-extra",
): Promise<{ certPem: string; keyPem: string; certFile: string; keyFile: string }> {
  await issue(
    certs.dir,
    name,
    `/CN=${cn}`,
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n" +
      "extendedKeyUsage=clientAuth\nauthorityKeyIdentifier=keyid\n",
  );
  const certFile = join(certs.dir, `${name}.crt`);
  const keyFile = join(certs.dir, `${name}.key`);
  return {
    certPem: await readFile(certFile, "utf8"),
    keyPem: await readFile(keyFile, "utf8"),
    certFile,
    keyFile,
  };
}

/**
 * Generates the test PKI into `dir` (a fresh temp dir when omitted). When `dir` already holds a complete set,
 * the files are reused, so a restarted test apiserver presents the same CA to clients that cached it.
 */
export async function generateTestCerts(dir?: string): Promise<TestCerts> {
  const target = dir ?? await mkdtemp(join(tmpdir(), "edgeproxy-certs-"));
  await mkdir(target, { recursive: true });
  const paths = Object.fromEntries(
    Object.entries(FILES).map(([k, f]) => [k, join(target, f)]),
  ) as Record<keyof typeof FILES, string>;
  if (!Object.values(paths).every((p) => existsSync(p))) {
    await openssl(
      [
        "req",
        "-x509",
        "-new",
        "-nodes",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "3650",
        "-sha256",
        "-subj",
        "/CN=edgeproxy-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        "-addext",
        "subjectKeyIdentifier=hash",
      ],
      target,
    );
    await issue(
      target,
      "server",
      "/CN=kube-apiserver",
      [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=serverAuth",
        "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost",
        "authorityKeyIdentifier=keyid",
        "",
      ].join("\n"),
    );
    await issue(
      target,
      "client",
      `/O=system:node-proxier/CN=${CLIENT_CERT_CN}`,
      [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "extendedKeyUsage=clientAuth",
        "authorityKeyIdentifier=keyid",
        "",
      ].join("\n"),
    );
  }
  const read = (p: string) => readFile(p, "utf8");
  return {
    dir: target,
    ...paths,
    caPem: await read(paths.caFile),
    serverCertPem: await read(paths.serverCertFile),
    serverKeyPem: await read(paths.serverKeyFile),
    clientCertPem: await read(paths.clientCertFile),
    clientKeyPem: await read(paths.clientKeyFile),
  };
}
