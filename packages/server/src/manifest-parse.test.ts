import { describe, expect, it, vi } from 'vitest';
import { MAX_MANIFEST_BYTES, MAX_MANIFEST_ERRORS, parseManifest } from './manifest-parse.js';
import { serviceWithSlice } from './test-support/manifests.js';

const svc = serviceWithSlice({
  clusterIP: '127.1.70.1',
  port: 80,
  endpoints: [{ ip: '127.1.70.2', port: 8080 }],
});

describe('parseManifest', () => {
  it("reports a key that is a map or a list as its own warning, not through the YAML library's stderr warning", () => {
    const emit = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      const text = 'apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  ? [x, y]\n  : 1\n';
      const result = parseManifest(text);
      expect(emit).not.toHaveBeenCalled();
      expect(result.warnings.join('\n')).toContain(
        'document 1: a key that is a map or a list (line 5) is used as its YAML text',
      );
    } finally {
      emit.mockRestore();
    }
  });

  it('reads Services and EndpointSlices from YAML documents, defaulting namespaces', () => {
    const r = parseManifest(
      `${svc}---\napiVersion: v1\nkind: Service\nmetadata: { name: other }\nspec:\n  clusterIP: 127.1.70.3\n  ports: [{ port: 53, protocol: UDP }]\n`,
    );
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.contents.services.map((s) => `${s.metadata.namespace}/${s.metadata.name}`)).toEqual([
      'default/web',
      'default/other',
    ]);
    expect(r.contents.endpointSlices).toHaveLength(1);
    expect(r.contents.endpoints).toEqual([]);
  });

  it('reads legacy Endpoints, Lists, and a JSON array', () => {
    const endpoints = {
      apiVersion: 'v1',
      kind: 'Endpoints',
      metadata: { name: 'db', namespace: 'prod' },
      subsets: [{ addresses: [{ ip: '127.1.70.5' }], ports: [{ port: 5432 }] }],
    };
    const service = {
      kind: 'Service',
      metadata: { name: 'db', namespace: 'prod' },
      spec: { clusterIP: '127.1.70.4', ports: [{ port: 5432 }] },
    };
    const list = parseManifest(
      JSON.stringify({ apiVersion: 'v1', kind: 'List', items: [service, endpoints] }),
    );
    const array = parseManifest(JSON.stringify([service, endpoints]));
    for (const r of [list, array]) {
      expect(r.ok).toBe(true);
      if (r.ok) {
        expect(r.contents.services).toHaveLength(1);
        expect(r.contents.endpoints).toHaveLength(1);
      }
    }
  });

  it('skips other kinds with a warning and empty documents silently', () => {
    const r = parseManifest(
      `---\n${svc}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: { name: web }\n---\n`,
    );
    expect(r).toMatchObject({
      ok: true,
      warnings: ['document 3: kind "Deployment" is not used by the proxy and is ignored'],
    });
  });

  it('collects every problem of a bad manifest', () => {
    const r = parseManifest(
      [
        'apiVersion: v1\nkind: Service\nmetadata: { name: a }\nspec: { ports: [{ port: 99999 }] }\n',
        'apiVersion: v2\nkind: Service\nmetadata: { name: b }\nspec: {}\n',
        'metadata: { name: c }\n',
        '42\n',
        `${svc}`,
        'apiVersion: v1\nkind: Service\nmetadata: { name: web }\nspec: { clusterIP: 127.1.70.9, ports: [{ port: 81 }] }\n',
        'kind: List\nitems: 3\n',
      ].join('---\n'),
    );
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors).toHaveLength(6);
    expect(r.errors[0]).toMatch(/^document 1 \(Service default\/a\): .*port/);
    expect(r.errors.slice(1)).toEqual([
      'document 2: apiVersion "v2" is not supported for Service; use "v1"',
      'document 3: "kind" is missing',
      'document 4: expected an object with a "kind", got number',
      'document 7: Service default/web is also defined in document 5',
      'document 8: a List must have an "items" list',
    ]);
  });

  it('reports YAML syntax errors with their position', () => {
    const r = parseManifest('kind: Service\nmetadata: { name: [\n');
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.errors[0]).toMatch(/^document 1: .*line \d+, column \d+/);
  });

  it('refuses a manifest over the size limit without parsing it', () => {
    const r = parseManifest(`# ${'x'.repeat(MAX_MANIFEST_BYTES)}`);
    expect(r).toMatchObject({
      ok: false,
      errors: [
        `the manifest is ${MAX_MANIFEST_BYTES + 2} bytes, larger than the limit of 16 MiB (${MAX_MANIFEST_BYTES} bytes); the file was not parsed`,
      ],
    });
  });

  it('caps the number of reported errors', () => {
    const many = Array.from({ length: 30 }, () => 'metadata: {}\n').join('---\n');
    const r = parseManifest(many);
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.errors).toHaveLength(MAX_MANIFEST_ERRORS + 1);
      expect(r.errors.at(-1)).toBe('… and 10 more');
    }
  });

  it('refuses a Service given both an Endpoints object and EndpointSlices (issue 12, defect 1)', () => {
    const result = parseManifest(`apiVersion: v1
kind: Service
metadata: { name: web, namespace: shop }
spec: { clusterIP: 10.0.0.1, ports: [{ port: 80 }] }
---
apiVersion: v1
kind: Endpoints
metadata: { name: web, namespace: shop }
subsets: [{ addresses: [{ ip: 10.1.0.1 }], ports: [{ port: 8080 }] }]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: { name: web-1, namespace: shop, labels: { kubernetes.io/service-name: web } }
addressType: IPv4
endpoints: [{ addresses: [10.1.0.2] }]
ports: [{ port: 8080 }]
`);
    expect(result.ok).toBe(false);
    if (!result.ok) {
      expect(result.errors).toContain(
        'Service shop/web is given both an Endpoints object and EndpointSlices; give it one or the other',
      );
    }
  });
});
