import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createManifestSource, ManifestError, type ReloadOutcome } from './source-manifest.js';
import { recordServiceEvents } from './test-support/informer-events.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

let dir: string;
let stop: AbortController;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-manifest-'));
  stop = new AbortController();
});

afterEach(async () => {
  stop.abort();
  await rm(dir, { recursive: true, force: true });
});

const web = (endpoints: { ip: string; port: number }[], port = 80) =>
  serviceWithSlice({ clusterIP: '127.1.70.1', port, endpoints });

const record = recordServiceEvents;

describe('ManifestSource', () => {
  it('reads the file at creation and delivers it when run, synced', async () => {
    const path = join(dir, 'services.yaml');
    await writeFile(path, web([{ ip: '127.1.70.2', port: 8080 }]));
    const source = await createManifestSource({ path });
    expect(source.services.hasSynced()).toBe(false);
    const services = record(source.services);
    void source.run(stop.signal);
    expect(services).toEqual(['add web']);
    expect(source.services.hasSynced()).toBe(true);
    expect(source.endpointSlices.hasSynced()).toBe(true);
    expect(source.endpoints.hasSynced()).toBe(true);
    expect(source.services.keys()).toEqual(['default/web']);
    expect(source.endpointSlices.keys()).toEqual(['default/web-1']);
  });

  it('refuses an invalid or missing file at start, listing the reasons', async () => {
    const path = join(dir, 'services.yaml');
    await writeFile(
      path,
      'kind: Service\nmetadata: { name: a }\nspec: { ports: [{ port: -1 }] }\n---\nmetadata: {}\n',
    );
    const err = await createManifestSource({ path }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ManifestError);
    expect((err as ManifestError).reasons).toHaveLength(2);
    await expect(createManifestSource({ path: join(dir, 'missing.yaml') })).rejects.toThrow(
      /cannot read/,
    );
  });

  it('applies edits live, ignores an invalid edit, and recovers when it is fixed', async () => {
    const path = join(dir, 'services.yaml');
    await writeFile(path, web([{ ip: '127.1.70.2', port: 8080 }]));
    const reloads: ReloadOutcome[] = [];
    const source = await createManifestSource({
      path,
      debounceMs: 20,
      onReload: (o) => reloads.push(o),
    });
    const services = record(source.services);
    const slices = record(source.endpointSlices);
    void source.run(stop.signal);

    await writeFile(
      path,
      web([
        { ip: '127.1.70.2', port: 8080 },
        { ip: '127.1.70.3', port: 8080 },
      ]),
    );
    await until(() => slices.includes('update web-1'), 'the slice update');
    expect(services).toEqual(['add web']); // the Service itself did not change

    await writeFile(
      path,
      `${web([])}\n---\nkind: Service\nmetadata: { name: broken }\nspec: { ports: [{ port: -1 }] }\n`,
    );
    await until(() => reloads.some((r) => !r.applied), 'the rejected reload');
    expect(reloads.find((r) => !r.applied)?.errors[0]).toMatch(
      /document 3 \(Service default\/broken\)/,
    );
    expect(source.endpointSlices.get('default/web-1')?.endpoints).toHaveLength(2);

    await writeFile(path, web([{ ip: '127.1.70.4', port: 8080 }], 81));
    await until(() => services.includes('update web'), 'the Service update');
    expect(source.services.get('default/web')?.spec.ports?.[0]?.port).toBe(81);
    expect(source.endpointSlices.get('default/web-1')?.endpoints).toHaveLength(1);
  });

  it('follows a file replaced by rename (editors, ConfigMap volumes) and a deletion of everything', async () => {
    const path = join(dir, 'services.yaml');
    await writeFile(path, web([{ ip: '127.1.70.2', port: 8080 }]));
    const source = await createManifestSource({ path, debounceMs: 20 });
    const services = record(source.services);
    void source.run(stop.signal);
    const next = join(dir, '.services.yaml.swp');
    await writeFile(
      next,
      '# nothing to serve: an explicit empty list (a blank file keeps the state)\n[]\n',
    );
    await rename(next, path);
    await until(() => services.includes('delete web'), 'the deletion');
    expect(source.services.keys()).toEqual([]);
  });

  it('does nothing when the content did not change', async () => {
    const path = join(dir, 'services.yaml');
    const text = web([{ ip: '127.1.70.2', port: 8080 }]);
    await writeFile(path, text);
    const source = await createManifestSource({ path });
    void source.run(stop.signal);
    const outcome = await source.load();
    expect(outcome).toMatchObject({ applied: true, unchanged: true, events: 0 });
  });

  it('keeps serving when the file disappears', async () => {
    const path = join(dir, 'services.yaml');
    await writeFile(path, web([{ ip: '127.1.70.2', port: 8080 }]));
    const source = await createManifestSource({ path });
    void source.run(stop.signal);
    await rm(path);
    const outcome = await source.load();
    expect(outcome.applied).toBe(false);
    expect(outcome.errors[0]).toMatch(/cannot read/);
    expect(source.services.keys()).toEqual(['default/web']);
  });
});
