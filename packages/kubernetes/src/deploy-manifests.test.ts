import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadAllYaml, loadYaml } from '@kubernetes/client-node';
import type { Service, SharedInformer } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { loadKubeConfig, TOKEN_FILE_AUTH_PROVIDER } from './kube-config.js';
import { createKubernetesSources } from './sources.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import { endpointSlice, kubeConfigFor, node, service, until } from './test-support/helpers.js';
import { IDLED_AT_ANNOTATION, UNIDLE_TARGETS_ANNOTATION } from './unidle-targets.js';
import { KubernetesUnidler } from './unidler.js';

// biome-ignore lint/suspicious/noExplicitAny: parsed manifests are untyped JSON
type Doc = any;

const deploy = (file: string) =>
  readFileSync(new URL(`../../../deploy/${file}`, import.meta.url), 'utf8');
const docs = (file: string): Doc[] => loadAllYaml(deploy(file)) as Doc[];

/** Scales one workload of each kind from 0, as the idling proxier's unidle hook does. */
async function unidle(server: FakeApiServer, clearAnnotations: boolean): Promise<void> {
  const targets = [
    ['deployments', 'Deployment'],
    ['statefulsets', 'StatefulSet'],
    ['replicasets', 'ReplicaSet'],
  ].map(([resource, kind]) => {
    server.store.create(resource as string, {
      metadata: { name: `idle-${resource}`, namespace: 'ns' },
      spec: { replicas: 0 },
    });
    return { kind, name: `idle-${resource}`, group: 'apps', replicas: 2 };
  });
  const svc = service('ns', 'idle', '10.96.0.2');
  svc.metadata.annotations = {
    [IDLED_AT_ANNOTATION]: '2026-12-01T00:00:00Z',
    [UNIDLE_TARGETS_ANNOTATION]: JSON.stringify(targets),
  };
  server.store.create('services', svc);
  const unidler = new KubernetesUnidler(kubeConfigFor(server.url), { clearAnnotations });
  unidler.needPods({
    service: svc as unknown as Service,
    servicePort: { namespace: 'ns', name: 'idle', port: 'http' },
  });
  await unidler.settled();
  expect(unidler.stats).toMatchObject({ scaled: 3, failed: 0 });
  expect(unidler.stats.annotationsCleared).toBe(clearAnnotations ? 1 : 0);
}

/** Exercises every API call the package makes in one mode, against a recording server. */
async function recordCalls(
  useEndpointSlices: boolean,
  clearAnnotations = false,
): Promise<Set<string>> {
  const server = await FakeApiServer.start();
  try {
    server.store.create('services', service('ns', 'web', '10.96.0.1'));
    server.store.create('endpointslices', endpointSlice('ns', 'web', ['10.1.0.1']));
    server.store.create('endpoints', { metadata: { name: 'web', namespace: 'ns' }, subsets: [] });
    server.store.create('nodes', node('n1', ['192.0.2.1']));
    const ac = new AbortController();
    const sources = await createKubernetesSources({
      kubeConfig: kubeConfigFor(server.url),
      nodeName: 'n1',
      useEndpointSlices,
    });
    const running = sources.run(ac.signal);
    const informers = [sources.services, sources.endpointSlices, sources.endpoints].filter(
      Boolean,
    ) as SharedInformer<unknown>[];
    await until(
      () => informers.every((i) => i.hasSynced()) && sources.nodeIPs().length > 0,
      'sync',
    );
    await until(() => server.openWatches() === 3, 'watches');
    const ref = { kind: 'Service', namespace: 'ns', name: 'web', uid: 'u' };
    sources.recorder.event(ref, 'Normal', 'NeedPods', 'x');
    sources.recorder.event(ref, 'Normal', 'NeedPods', 'x'); // a repeat: a patch
    await until(() => server.count('patch', 'events') >= 1, 'events');
    ac.abort();
    await running;
    await unidle(server, clearAnnotations);
    return new Set(server.requests.map((r) => `${r.group}/${r.resource}/${r.verb}`));
  } finally {
    await server.close();
  }
}

describe('deploy/ manifests', () => {
  it('grant exactly the API calls the daemon makes (RBAC)', async () => {
    // The daemon always uses EndpointSlices; main-cluster.test.ts in the server package also checks
    // every call the real daemon process makes against this ClusterRole.
    const used = await recordCalls(true);
    const role = docs('rbac.yaml').find((d) => d.kind === 'ClusterRole');
    const granted = new Set<string>();
    for (const rule of role.rules) {
      for (const group of rule.apiGroups) {
        for (const resource of rule.resources)
          for (const verb of rule.verbs) granted.add(`${group}/${resource}/${verb}`);
      }
    }
    expect([...granted].some((g) => g.includes('*'))).toBe(false);
    expect([...used].filter((u) => !granted.has(u))).toEqual([]); // nothing the code does is forbidden
    expect([...granted].filter((g) => !used.has(g))).toEqual([]); // nothing granted goes unused
    // Embedders who choose legacy Endpoints need exactly these two more (docs/kubernetes.md).
    const legacy = await recordCalls(false);
    expect([...legacy].filter((u) => !granted.has(u)).sort()).toEqual([
      '/endpoints/list',
      '/endpoints/watch',
    ]);
    // The unidler's scale reads and writes are in the role; clearing the idling annotations after a
    // scale-up (clearAnnotations, off by default) needs patch on services as well.
    for (const kind of ['deployments', 'statefulsets', 'replicasets']) {
      expect(used).toContain(`apps/${kind}/scale/get`);
      expect(used).toContain(`apps/${kind}/scale/update`);
    }
    const clearing = await recordCalls(true, true);
    expect([...clearing].filter((u) => !granted.has(u)).sort()).toEqual(['/services/patch']);
  });

  it('bind the role to the DaemonSet service account', () => {
    const [binding] = docs('rbac.yaml').filter((d) => d.kind === 'ClusterRoleBinding');
    const sa = loadYaml(deploy('serviceaccount.yaml')) as Doc;
    const ds = loadYaml(deploy('daemonset.yaml')) as Doc;
    const role = docs('rbac.yaml').find((d) => d.kind === 'ClusterRole');
    expect(binding.roleRef).toEqual({
      apiGroup: 'rbac.authorization.k8s.io',
      kind: 'ClusterRole',
      name: role.metadata.name,
    });
    expect(binding.subjects).toEqual([
      { kind: 'ServiceAccount', name: sa.metadata.name, namespace: sa.metadata.namespace },
    ]);
    expect(ds.spec.template.spec.serviceAccountName).toBe(sa.metadata.name);
    expect(ds.metadata.namespace).toBe(sa.metadata.namespace);
    const kustomization = loadYaml(deploy('kustomization.yaml')) as Doc;
    expect(kustomization.resources.sort()).toEqual([
      'configmap.yaml',
      'daemonset.yaml',
      'rbac.yaml',
      'serviceaccount.yaml',
    ]);
  });

  it('wire the health port to the probes and the node name to --hostname-override', () => {
    const ds = loadYaml(deploy('daemonset.yaml')) as Doc;
    const cm = loadYaml(deploy('configmap.yaml')) as Doc;
    const config = loadYaml(cm.data['config.yaml']) as Doc;
    const [container] = ds.spec.template.spec.containers;
    const healthPort = container.ports.find((p: Doc) => p.name === 'healthz');
    expect(config.healthzBindAddress).toBe(`0.0.0.0:${healthPort.containerPort}`);
    for (const probe of [container.livenessProbe, container.readinessProbe]) {
      expect(probe.httpGet).toEqual({ path: '/livez', port: 'healthz' });
    }
    // The health server listens only after the daemon waited for its Node (30 s at most by default,
    // userspaceProxy.nodeWaitTimeout): the liveness probe must not restart it before that.
    const live = container.livenessProbe;
    const grace = live.initialDelaySeconds + live.periodSeconds * live.failureThreshold;
    expect(config.nodePortAddresses).toContain('primary');
    expect(config.userspaceProxy?.nodeWaitTimeout).toBeUndefined(); // the 30 s default
    expect(grace).toBeGreaterThan(30 * 2);
    expect(container.args).toContain('--hostname-override=$(NODE_NAME)');
    // Not the cluster DNS, whose ClusterIP this proxy is what serves.
    expect(ds.spec.template.spec.hostNetwork).toBe(true);
    expect(ds.spec.template.spec.dnsPolicy).toBe('Default');
    expect(container.env).toContainEqual({
      name: 'NODE_NAME',
      valueFrom: { fieldRef: { fieldPath: 'spec.nodeName' } },
    });
    const mounts = new Map(container.volumeMounts.map((m: Doc) => [m.name, m.mountPath]));
    expect(`${mounts.get('kubeconfig')}/kubeconfig.conf`).toBe(config.clientConnection.kubeconfig);
    expect(`${mounts.get('config')}/config.yaml`).toBe(container.args[0].replace('--config=', ''));
  });

  it("ship a kubeconfig that uses the pod's rotating service-account token and CA", () => {
    const cm = loadYaml(deploy('configmap.yaml')) as Doc;
    const dir = mkdtempSync(join(tmpdir(), 'deploy-'));
    try {
      const file = join(dir, 'kubeconfig.conf');
      writeFileSync(file, cm.data['kubeconfig.conf']);
      const kc = loadKubeConfig({ kubeconfig: file });
      expect(kc.getCurrentUser()?.authProvider).toEqual({
        name: TOKEN_FILE_AUTH_PROVIDER,
        config: { path: '/var/run/secrets/kubernetes.io/serviceaccount/token' },
      });
      expect(kc.getCurrentCluster()?.caFile).toBe(
        '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
