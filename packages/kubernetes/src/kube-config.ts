import { existsSync, readFileSync } from 'node:fs';
import { isIPv6 } from 'node:net';
import { join } from 'node:path';
import { KubeConfig, loadYaml, type User } from '@kubernetes/client-node';
import { InvalidOptionError } from '@userspace-proxy/core';

/** Where a pod finds its service-account credentials. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The auth provider this package gives users whose token is in a file; see {@link TokenFileAuth}. */
export const TOKEN_FILE_AUTH_PROVIDER = 'userspace-proxy/token-file';

/** How long a token read from a file is used before the file is read again (client-go's minute). */
const TOKEN_REREAD_MS = 60_000;

type Authenticator = Parameters<KubeConfig['addAuthenticator']>[0];

/**
 * Sends the token kept in a file (a service-account token, a kubeconfig `tokenFile`), re-read every
 * minute so a rotated token is followed, and trimmed of surrounding white space as client-go does.
 * client-node's own token-file provider sends the file as it is: a file written with `echo` ends in a
 * newline, which is not a legal header value, and every request would fail. When a re-read fails, the
 * last token read keeps being sent.
 */
class TokenFileAuth implements Authenticator {
  readonly #cache = new Map<string, { token: string; readAt: number }>();

  isAuthProvider(user: Parameters<Authenticator['isAuthProvider']>[0]): boolean {
    return (
      user.authProvider?.name === TOKEN_FILE_AUTH_PROVIDER &&
      typeof user.authProvider.config?.path === 'string'
    );
  }

  async applyAuthentication(
    user: Parameters<Authenticator['applyAuthentication']>[0],
    opts: Parameters<Authenticator['applyAuthentication']>[1],
  ): Promise<void> {
    const path = user.authProvider?.config?.path as string;
    let entry = this.#cache.get(path);
    if (entry === undefined || Date.now() - entry.readAt > TOKEN_REREAD_MS) {
      try {
        entry = { token: readFileSync(path, 'utf8').trim(), readAt: Date.now() };
        this.#cache.set(path, entry);
      } catch (err) {
        if (entry === undefined) throw err;
      }
    }
    if (entry.token === '') return;
    const headers = (opts.headers ?? {}) as Record<string, string>;
    headers.Authorization = `Bearer ${entry.token}`;
    opts.headers = headers;
  }
}

/** The user entry for a token file, served by {@link TokenFileAuth}. */
function tokenFileProvider(path: string): User['authProvider'] {
  return { name: TOKEN_FILE_AUTH_PROVIDER, config: { path } };
}

/** How to reach the API server, in kube-proxy's order of precedence. */
export interface KubeConfigSource {
  /** An already loaded config; used as is (`kubeconfig` and `master` are then ignored). */
  kubeConfig?: KubeConfig;
  /** Path of a kubeconfig file (`--kubeconfig`). */
  kubeconfig?: string;
  /** API server URL (`--master`); overrides the kubeconfig's server, or alone means anonymous access. */
  master?: string;
  /** The service-account directory for in-cluster configuration. Default {@link SERVICE_ACCOUNT_DIR}. */
  serviceAccountDir?: string;
  /** The environment read for KUBERNETES_SERVICE_HOST/PORT. Default `process.env`. */
  env?: Record<string, string | undefined>;
}

/**
 * Builds the client configuration as kube-proxy (client-go's BuildConfigFromFlags) does: a given
 * config; else `--kubeconfig`, with `--master` overriding its server; else `--master` alone; else
 * in-cluster: https to KUBERNETES_SERVICE_HOST:PORT, trusting the service-account CA and sending its
 * token, which is re-read every minute so rotated tokens keep working (see TokenFileAuth).
 * @throws InvalidOptionError when nothing usable is configured.
 */
export function loadKubeConfig(src: KubeConfigSource = {}): KubeConfig {
  if (src.kubeConfig) return src.kubeConfig;
  const kc = new KubeConfig();
  kc.addAuthenticator(new TokenFileAuth());
  if (src.kubeconfig) {
    if (!existsSync(src.kubeconfig)) {
      throw new InvalidOptionError('kubeconfig', `file ${src.kubeconfig} does not exist`);
    }
    kc.loadFromFile(src.kubeconfig);
    adoptTokenFiles(kc, readFileSync(src.kubeconfig, 'utf8'));
    const current = kc.getCurrentCluster();
    if (!current)
      throw new InvalidOptionError('kubeconfig', `${src.kubeconfig} names no current cluster`);
    if (src.master) {
      kc.loadFromOptions({
        clusters: kc.clusters.map((c) =>
          c.name === current.name
            ? { ...c, server: src.master, skipTLSVerify: c.skipTLSVerify || isHttp(src.master) }
            : c,
        ),
        users: kc.users,
        contexts: kc.contexts,
        currentContext: kc.currentContext,
      });
    }
    return kc;
  }
  if (src.master) {
    if (!/^https?:\/\//.test(src.master)) {
      throw new InvalidOptionError('master', `"${src.master}" is not an http(s) URL`);
    }
    kc.loadFromOptions({
      clusters: [{ name: 'master', server: src.master, skipTLSVerify: isHttp(src.master) }],
      users: [{ name: 'anonymous' }],
      contexts: [{ name: 'master', cluster: 'master', user: 'anonymous' }],
      currentContext: 'master',
    });
    return kc;
  }
  const env = src.env ?? process.env;
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    throw new InvalidOptionError(
      'kubeconfig',
      'none of --kubeconfig, --master or an in-cluster environment (KUBERNETES_SERVICE_HOST/PORT) is available',
    );
  }
  const dir = src.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const tokenFile = join(dir, 'token');
  const caFile = join(dir, 'ca.crt');
  for (const file of [tokenFile, caFile]) {
    if (!existsSync(file))
      throw new InvalidOptionError('in-cluster config', `${file} does not exist`);
  }
  kc.loadFromOptions({
    clusters: [
      {
        name: 'in-cluster',
        server: `https://${isIPv6(host) ? `[${host}]` : host}:${port}`,
        caFile,
      },
    ],
    users: [{ name: 'service-account', authProvider: tokenFileProvider(tokenFile) }],
    contexts: [{ name: 'in-cluster', cluster: 'in-cluster', user: 'service-account' }],
    currentContext: 'in-cluster',
  });
  return kc;
}

/**
 * client-go kubeconfigs may name a token file (`tokenFile`, as kubeadm's kube-proxy kubeconfig does
 * with the service-account token). client-node reads `token-file` once and ignores `tokenFile`; both
 * are served by TokenFileAuth here, which re-reads the file every minute, so a rotated projected
 * token keeps working.
 */
function adoptTokenFiles(kc: KubeConfig, text: string): void {
  let doc: { users?: { name?: string; user?: Record<string, unknown> }[] };
  try {
    doc = loadYaml(text) as typeof doc;
  } catch {
    return;
  }
  const files = new Map<string, string>();
  for (const u of Array.isArray(doc?.users) ? doc.users : []) {
    const file = u?.user?.tokenFile ?? u?.user?.['token-file'];
    if (typeof u?.name === 'string' && typeof file === 'string' && file !== '' && !u.user?.token) {
      files.set(u.name, file);
    }
  }
  if (files.size === 0) return;
  const users: User[] = kc.users.map((user) => {
    const tokenFile = files.get(user.name);
    if (!tokenFile) return user;
    const { token: _token, ...rest } = user;
    return { ...rest, authProvider: tokenFileProvider(tokenFile) };
  });
  kc.loadFromOptions({
    clusters: kc.clusters,
    users,
    contexts: kc.contexts,
    currentContext: kc.currentContext,
  });
}

function isHttp(url: string | undefined): boolean {
  return url?.startsWith('http:') ?? false;
}
