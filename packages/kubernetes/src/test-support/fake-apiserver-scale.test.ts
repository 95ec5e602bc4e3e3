import { AppsV1Api, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeApiServer } from './fake-apiserver.js';
import { kubeConfigFor } from './helpers.js';

/** The fake API server's scale subresource, driven by client-node's own AppsV1Api. */
describe('FakeApiServer: the scale subresource', () => {
  let server: FakeApiServer;
  let apps: AppsV1Api;

  beforeEach(async () => {
    server = await FakeApiServer.start();
    apps = kubeConfigFor(server.url).makeApiClient(AppsV1Api);
    for (const resource of ['deployments', 'statefulsets', 'replicasets']) {
      server.store.create(resource, {
        metadata: { name: 'w', namespace: 'ns' },
        spec: { replicas: 0 },
      });
    }
  });
  afterEach(() => server.close());

  const replicas = (resource: string) =>
    (server.store.get(resource, 'ns', 'w')?.spec as { replicas?: number } | undefined)?.replicas;

  it('GET omits spec.replicas at 0; PUT sets it, refusing a stale resource version (409)', async () => {
    const scale = await apps.readNamespacedDeploymentScale({ name: 'w', namespace: 'ns' });
    expect(scale.kind).toBe('Scale');
    expect(scale.spec?.replicas).toBeUndefined();
    const body = { ...scale, spec: { replicas: 3 } };
    await apps.replaceNamespacedDeploymentScale({ name: 'w', namespace: 'ns', body });
    expect(replicas('deployments')).toBe(3);
    await expect(
      apps.replaceNamespacedDeploymentScale({ name: 'w', namespace: 'ns', body }),
    ).rejects.toMatchObject({ code: 409 });
    expect(server.requests.map((r) => `${r.group}/${r.resource}/${r.verb}`)).toEqual([
      'apps/deployments/scale/get',
      'apps/deployments/scale/update',
      'apps/deployments/scale/update',
    ]);
  });

  it('PATCH applies a JSON patch (with test) or a merge patch to the Scale', async () => {
    await apps.patchNamespacedStatefulSetScale({
      name: 'w',
      namespace: 'ns',
      body: [{ op: 'replace', path: '/spec/replicas', value: 2 }],
    });
    expect(replicas('statefulsets')).toBe(2);
    await expect(
      apps.patchNamespacedStatefulSetScale({
        name: 'w',
        namespace: 'ns',
        body: [
          { op: 'test', path: '/spec/replicas', value: 7 },
          { op: 'replace', path: '/spec/replicas', value: 9 },
        ],
      }),
    ).rejects.toMatchObject({ code: 422 });
    expect(replicas('statefulsets')).toBe(2);
    await apps.patchNamespacedReplicaSetScale(
      { name: 'w', namespace: 'ns', body: { spec: { replicas: 4 } } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
    expect(replicas('replicasets')).toBe(4);
  });

  it('answers 404 for a missing workload or an unknown subresource', async () => {
    await expect(
      apps.readNamespacedDeploymentScale({ name: 'none', namespace: 'ns' }),
    ).rejects.toMatchObject({ code: 404 });
    await expect(
      apps.readNamespacedDeploymentStatus({ name: 'w', namespace: 'ns' }),
    ).rejects.toMatchObject({ code: 404 });
  });
});
