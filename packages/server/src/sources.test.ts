import { noopLogger } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import {
  chooseSource,
  KUBERNETES_UNAVAILABLE,
  loadClusterSources,
  type ProxySources,
} from './sources.js';

describe('chooseSource', () => {
  const none = { servicesFile: '', kubeconfig: '', master: '', env: {} };

  it('uses the manifest when one is given', () => {
    expect(chooseSource({ ...none, servicesFile: 's.yaml' })).toEqual({
      kind: 'manifest',
      path: 's.yaml',
    });
    // In a Pod, an explicit manifest still wins.
    expect(
      chooseSource({
        ...none,
        servicesFile: 's.yaml',
        env: { KUBERNETES_SERVICE_HOST: '10.0.0.1' },
      }).kind,
    ).toBe('manifest');
  });

  it('uses the cluster for --kubeconfig, --master, or in a Pod', () => {
    expect(chooseSource({ ...none, kubeconfig: '/k' })).toMatchObject({
      kind: 'cluster',
      kubeconfig: '/k',
      inCluster: false,
    });
    expect(chooseSource({ ...none, master: 'https://api' })).toMatchObject({
      kind: 'cluster',
      master: 'https://api',
    });
    expect(chooseSource({ ...none, env: { KUBERNETES_SERVICE_HOST: '10.0.0.1' } })).toMatchObject({
      kind: 'cluster',
      inCluster: true,
    });
  });

  it('refuses no source and two sources with a clear message', () => {
    expect(chooseSource(none)).toEqual({
      kind: 'none',
      error: expect.stringMatching(/^no source of Services: give --services-file/),
    });
    expect(chooseSource({ ...none, servicesFile: 's', master: 'https://api' })).toEqual({
      kind: 'none',
      error: expect.stringMatching(/choose one source/),
    });
  });
});

describe('loadClusterSources', () => {
  const options = {
    nodeName: 'n1',
    useEndpointSlices: true as const,
    resyncPeriodMs: 900_000,
    logger: noopLogger,
  };

  it('calls createKubernetesSources with the options', async () => {
    const fake = { run: async () => {} } as unknown as ProxySources;
    let got: unknown;
    const sources = await loadClusterSources({ ...options, master: 'https://api' }, async () => ({
      createKubernetesSources: async (o: unknown) => {
        got = o;
        return fake;
      },
    }));
    expect(sources).toBe(fake);
    expect(got).toEqual({ ...options, master: 'https://api' });
  });

  it('finds createKubernetesSources in this build’s @userspace-proxy/kubernetes', async () => {
    // An invalid node name makes the real factory refuse before it touches any network.
    const err = await loadClusterSources({ ...options, nodeName: 'Not A Node!' }).catch(
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).not.toContain(KUBERNETES_UNAVAILABLE);
    expect((err as Error).message).toMatch(/node name|nodeName/i);
  });

  it('fails clearly when the build has no Kubernetes source', async () => {
    await expect(loadClusterSources(options, async () => ({}))).rejects.toThrow(
      KUBERNETES_UNAVAILABLE,
    );
    await expect(
      loadClusterSources(options, async () => {
        throw new Error('Cannot find package');
      }),
    ).rejects.toThrow('the Kubernetes source is not available in this build');
  });
});
