import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidOptionError, noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { loadKubeConfig } from './kube-config.js';
import { makePagedList } from './list-pager.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import { service } from './test-support/helpers.js';

const tls = (f: string) => readFileSync(new URL(`./test-support/tls/${f}`, import.meta.url));

let dir: string;
let server: FakeApiServer | undefined;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'kube-config-'));
});
afterEach(async () => {
  vi.useRealTimers();
  rmSync(dir, { recursive: true, force: true });
  await server?.close();
  server = undefined;
});

async function listServices(kc: ReturnType<typeof loadKubeConfig>) {
  return makePagedList(kc, '/api/v1/services', { logger: noopLogger })();
}

describe('loadKubeConfig', () => {
  it('reads the in-cluster service-account token and CA from files and verifies TLS with them', async () => {
    server = await FakeApiServer.start({
      tls: { key: tls('server.key'), cert: tls('server.crt') },
      token: 'sa-token',
    });
    server.store.create('services', service('ns', 'a', '10.0.0.1'));
    writeFileSync(join(dir, 'token'), 'sa-token');
    writeFileSync(join(dir, 'ca.crt'), tls('ca.crt'));
    const port = new URL(server.url).port;
    const kc = loadKubeConfig({
      serviceAccountDir: dir,
      env: { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port },
    });
    expect(kc.getCurrentCluster()?.server).toBe(`https://127.0.0.1:${port}`);
    const list = await listServices(kc);
    expect(list.items.map((s) => s.metadata.name)).toEqual(['a']);
    expect(server.requests[0]?.authorization).toBe('Bearer sa-token');
  });

  it('refuses a server whose certificate the service-account CA did not sign', async () => {
    server = await FakeApiServer.start({
      tls: { key: tls('server.key'), cert: tls('server.crt') },
    });
    writeFileSync(join(dir, 'token'), 't');
    writeFileSync(join(dir, 'ca.crt'), tls('server.crt')); // a leaf, not the CA
    const kc = loadKubeConfig({
      serviceAccountDir: dir,
      env: {
        KUBERNETES_SERVICE_HOST: '127.0.0.1',
        KUBERNETES_SERVICE_PORT: new URL(server.url).port,
      },
    });
    await expect(listServices(kc)).rejects.toThrow();
    expect(server.requests).toEqual([]);
  });

  it('brackets an IPv6 service host', () => {
    writeFileSync(join(dir, 'token'), 't');
    writeFileSync(join(dir, 'ca.crt'), tls('ca.crt'));
    const kc = loadKubeConfig({
      serviceAccountDir: dir,
      env: { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443' },
    });
    expect(kc.getCurrentCluster()?.server).toBe('https://[fd00::1]:443');
  });

  it('fails clearly when nothing is configured or the service-account files are missing', () => {
    expect(() => loadKubeConfig({ env: {} })).toThrow(InvalidOptionError);
    expect(() =>
      loadKubeConfig({
        serviceAccountDir: dir,
        env: { KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443' },
      }),
    ).toThrow(/token does not exist/);
    expect(() => loadKubeConfig({ kubeconfig: join(dir, 'nope') })).toThrow(/does not exist/);
    expect(() => loadKubeConfig({ master: 'ftp://x' })).toThrow(InvalidOptionError);
  });

  it('uses --master alone as an anonymous endpoint', async () => {
    server = await FakeApiServer.start();
    const kc = loadKubeConfig({ master: server.url, env: {} });
    await listServices(kc);
    expect(server.requests[0]?.authorization).toBeUndefined();
  });

  it('reads --kubeconfig, with --master overriding its server', async () => {
    server = await FakeApiServer.start({ token: 'file-token' });
    const file = join(dir, 'config');
    writeFileSync(
      file,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters: [{name: c, cluster: {server: "https://203.0.113.1:6443"}}]',
        'users: [{name: u, user: {token: file-token}}]',
        'contexts: [{name: x, context: {cluster: c, user: u}}]',
        'current-context: x',
      ].join('\n'),
    );
    expect(loadKubeConfig({ kubeconfig: file }).getCurrentCluster()?.server).toBe(
      'https://203.0.113.1:6443',
    );
    const kc = loadKubeConfig({ kubeconfig: file, master: server.url });
    await listServices(kc);
    expect(server.requests[0]?.authorization).toBe('Bearer file-token');
  });

  it("reads kubeadm's kube-proxy kubeconfig (tokenFile, CA file) and picks up a rotated token", async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    server = await FakeApiServer.start({
      tls: { key: tls('server.key'), cert: tls('server.crt') },
    });
    writeFileSync(join(dir, 'token'), 'first\n'); // as `echo first > token` writes it
    writeFileSync(join(dir, 'ca.crt'), tls('ca.crt'));
    const file = join(dir, 'kubeconfig.conf');
    writeFileSync(
      file,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        '- name: default',
        '  cluster:',
        '    certificate-authority: ca.crt',
        `    server: ${server.url}`,
        'contexts:',
        '- name: default',
        '  context: {cluster: default, namespace: default, user: default}',
        'current-context: default',
        'users:',
        '- name: default',
        '  user:',
        `    tokenFile: ${join(dir, 'token')}`,
      ].join('\n'),
    );
    const kc = loadKubeConfig({ kubeconfig: file });
    await listServices(kc);
    writeFileSync(join(dir, 'token'), ' rotated\r\n');
    vi.setSystemTime(Date.now() + 61_000);
    await listServices(kc);
    rmSync(join(dir, 'token')); // a failed re-read keeps the last token
    vi.setSystemTime(Date.now() + 61_000);
    await listServices(kc);
    expect(server.requests.map((r) => r.authorization)).toEqual([
      'Bearer first',
      'Bearer rotated',
      'Bearer rotated',
    ]);
  });
});
