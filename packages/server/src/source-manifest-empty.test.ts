import { EventEmitter } from 'node:events';
import type { watch as fsWatch } from 'node:fs';
import { mkdtemp, rm, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { spyLogger } from '../../core/src/test-support/spy-logger.js';
import {
  createManifestSource,
  isBlankManifest,
  type ManifestSourceOptions,
  type ReloadOutcome,
} from './source-manifest.js';
import { ask, type Backends, Client, startBackends } from './test-support/backends.js';
import { type DaemonProcess, spawnDaemon } from './test-support/daemon-process.js';
import { recordServiceEvents } from './test-support/informer-events.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

// What an emptied services file means: nothing yet (a truncate-then-write in progress), never "no
// Services"; an explicit empty list is. Loopback addresses of this file only: 127.1.74.0/24.

let dir: string;
let stop: AbortController;
let proc: DaemonProcess | undefined;
let backends: Backends | undefined;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-manifest-empty-'));
  stop = new AbortController();
});

afterEach(async () => {
  stop.abort();
  if (proc && proc.child.exitCode === null && proc.child.signalCode === null) {
    proc.child.kill('SIGKILL');
    await proc.exited;
  }
  proc = undefined;
  await backends?.close();
  backends = undefined;
  await rm(dir, { recursive: true, force: true });
});

const two = (clusterIP: string, endpoint: string) =>
  `${serviceWithSlice({ name: 'a', clusterIP, port: 80, endpoints: [{ ip: endpoint, port: 8080 }] })}\n---\n${serviceWithSlice({ name: 'b', clusterIP, port: 81, endpoints: [{ ip: endpoint, port: 8080 }] })}`;

/** Writes `text`, creates the source on it, records its Service events and reloads, and runs it. */
async function started(
  text: string,
  options: Partial<ManifestSourceOptions> = {},
  signal = stop.signal,
) {
  const path = join(dir, 'services.yaml');
  await writeFile(path, text);
  const reloads: ReloadOutcome[] = [];
  const source = await createManifestSource({
    path,
    debounceMs: 20,
    onReload: (o) => reloads.push(o),
    ...options,
  });
  const services = recordServiceEvents(source.services);
  void source.run(signal);
  return { path, source, reloads, services };
}

describe('isBlankManifest', () => {
  it('is true for no content: nothing, white space, comments and document markers', () => {
    for (const text of [
      '',
      ' \n\t\n',
      '\r\n',
      '\uFEFF',
      '# every Service removed for now\n',
      '---\n# a\n---\n...\n',
      '--- # a comment\n  # indented\n',
    ]) {
      expect(isBlankManifest(text), JSON.stringify(text)).toBe(true);
    }
  });

  it('is false for any content, an explicit empty list included', () => {
    for (const text of [
      '[]',
      '--- []',
      'kind: List\nitems: []\n',
      '{}',
      'null',
      '# c\nkind: Service',
    ]) {
      expect(isBlankManifest(text), JSON.stringify(text)).toBe(false);
    }
  });
});

describe('ManifestSource and a file without content', () => {
  it('keeps every Service through a truncate-then-write, warning once; then applies the write', async () => {
    const logger = spyLogger();
    const { path, source, reloads, services } = await started(two('127.1.74.1', '127.1.74.2'), {
      logger,
    });
    expect(services).toEqual(['add a', 'add b']);

    await truncate(path, 0);
    await until(() => reloads.some((r) => r.empty), 'the blank read to be reported');
    // Blank again (a further notice, a second truncate, white space): silent, nothing changes.
    await writeFile(path, '\n  \n');
    await writeFile(path, '');
    await new Promise((r) => setTimeout(r, 100)); // settle delays: further reads would report
    expect(reloads.filter((r) => r.empty)).toHaveLength(1);
    const warned = logger.warn.mock.calls.map((c) => String(c[0]));
    expect(warned.filter((m) => m.includes('has no content'))).toEqual([
      `${source.path} has no content (a write in progress?): keeping the current 2 Service(s) and reading it again; to remove every Service write an empty list, [] (or a List with items: [])`,
    ]);
    expect(services).toEqual(['add a', 'add b']);
    expect(source.services.keys().sort()).toEqual(['default/a', 'default/b']);

    await writeFile(path, two('127.1.74.1', '127.1.74.3'));
    await until(() => reloads.some((r) => r.applied && r.events > 0), 'the write to apply');
    // Only the slices changed: the Services were never deleted.
    expect(services).toEqual(['add a', 'add b']);
    expect(logger.error).not.toHaveBeenCalled();
  });

  it('after a blank read, says so when the same text comes back', async () => {
    const text = two('127.1.74.1', '127.1.74.2');
    const { path, reloads, services } = await started(text);
    await writeFile(path, '');
    await until(() => reloads.some((r) => r.empty), 'the blank read');
    await writeFile(path, text);
    await until(() => reloads.some((r) => r.applied), 'the same text to be reported');
    expect(reloads.map((r) => [r.empty ?? false, r.applied, r.events])).toEqual([
      [true, false, 0],
      [false, true, 0],
    ]);
    expect(services).toEqual(['add a', 'add b']);
  });

  it('reads a blank file again after the settle delay, so a write without a notice is seen', async () => {
    // A watcher that reports the truncate but not the write that follows it.
    const emitter = new EventEmitter() as EventEmitter & { close(): void };
    emitter.close = () => {};
    let notify: () => void = () => {};
    const watch = ((_dir: string, _opts: unknown, listener: () => void) => {
      notify = listener;
      return emitter;
    }) as unknown as typeof fsWatch;
    const { path, reloads, services } = await started(two('127.1.74.1', '127.1.74.2'), {
      watch,
      debounceMs: 200,
    });
    await writeFile(path, '');
    notify();
    await until(() => reloads.some((r) => r.empty), 'the blank read');
    await writeFile(
      path,
      serviceWithSlice({ name: 'a', clusterIP: '127.1.74.1', port: 80, endpoints: [] }),
    );
    await until(() => reloads.some((r) => r.applied), 'the re-read to apply the write');
    expect(services.slice(2).sort()).toEqual(['delete b', 'update a']);
  });

  it('applies an explicit empty list: every Service goes', async () => {
    for (const empty of ['[]\n', '# none\napiVersion: v1\nkind: List\nitems: []\n']) {
      const ac = new AbortController();
      const { path, reloads, services } = await started(
        two('127.1.74.1', '127.1.74.2'),
        {},
        ac.signal,
      );
      await writeFile(path, empty);
      await until(() => reloads.some((r) => r.applied), `${JSON.stringify(empty)} to apply`);
      expect(services).toEqual(['add a', 'add b', 'delete a', 'delete b']);
      expect(reloads[0]?.counts).toEqual({ services: 0, endpointSlices: 0, endpoints: 0 });
      ac.abort();
    }
  });

  it('starts with no Services from a blank file, with a warning, and applies a later write', async () => {
    const logger = spyLogger();
    const { path, source, reloads, services } = await started('# nothing yet\n', { logger });
    expect(String(logger.warn.mock.calls[0]?.[0])).toContain(
      'has no content: starting with no Services',
    );
    expect(source.services.hasSynced()).toBe(true);
    expect(services).toEqual([]);
    await writeFile(path, two('127.1.74.1', '127.1.74.2'));
    await until(() => reloads.some((r) => r.applied), 'the write');
    expect(services).toEqual(['add a', 'add b']);
    expect(reloads.filter((r) => r.empty)).toEqual([]); // the start's warning is the only one
  });
});

describe('the daemon and an emptied services file', () => {
  it('keeps listeners and connections through a two-step rewrite; an empty list closes them', async () => {
    const serviceIP = '127.1.74.11';
    backends = await startBackends({ A: '127.1.74.12' });
    const path = join(dir, 'services.yaml');
    const text = serviceWithSlice({
      clusterIP: serviceIP,
      port: 8080,
      endpoints: [{ ip: '127.1.74.12', port: backends.port }],
    });
    await writeFile(path, text);
    proc = spawnDaemon([
      '--services-file',
      path,
      '--healthz-bind-address',
      '127.1.74.14:10256',
      '--metrics-bind-address',
      '127.1.74.14:10249',
    ]);
    const daemon = proc;
    await until(
      async () => (await ask(serviceIP, 8080, 'ping', 1000)) === 'A:ping',
      'the Service to answer',
      30_000,
    );
    const held = new Client(serviceIP, 8080);
    await held.roundTrip('one', 'A:one');

    // An editor's save in two steps: truncate, then write.
    await truncate(path, 0);
    await until(() => daemon.stderr().includes('has no content'), 'the blank file warning');
    expect(await ask(serviceIP, 8080, 'during', 2000)).toBe('A:during');
    await held.roundTrip('two', 'A:two');
    await writeFile(path, text);
    await until(() => daemon.stderr().includes('0 change(s)'), 'the file to be whole again');
    await held.roundTrip('three', 'A:three');
    expect(held.closed).toBe(false);
    expect(daemon.stderr()).not.toMatch(/ERROR/);

    // "No Services", said explicitly: the listener closes.
    await writeFile(path, '[]\n');
    await until(
      async () => (await ask(serviceIP, 8080, 'gone', 1000)) === 'ECONNREFUSED',
      'the listener to close',
    );
    held.socket.destroy();
  }, 60_000);
});
