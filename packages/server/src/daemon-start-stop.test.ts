import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noopLogger, type Proxier } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import { createSources } from './source-select.js';
import { loopbackBlock } from './test-support/loopback.js';
import { serviceWithSlice } from './test-support/manifests.js';
import { until } from './test-support/wait.js';

// A stop (SIGTERM) that comes while start() is still building must close everything the start
// built, and `exited` must not resolve before: it did, and the start then shut the proxier down on
// its own, skipping the rest (the SCTP engine, the idler, the unidler), so an embedder that awaited
// `exited` and started another daemon found them still there.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const SERVERS_IP = `${NET}4`;

let dir: string;
let manifest: string;

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'up-start-stop-'));
  manifest = join(dir, 'services.yaml');
  await writeFile(
    manifest,
    serviceWithSlice({
      clusterIP: SERVICE_IP,
      port: 8080,
      endpoints: [{ ip: `${NET}2`, port: 9 }],
    }),
  );
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function config(mutate: (c: KubeProxyConfiguration) => void = () => {}): KubeProxyConfiguration {
  const c = defaultConfiguration();
  c.userspaceProxy.servicesFile = manifest;
  c.healthzBindAddress = `${SERVERS_IP}:10256`;
  c.metricsBindAddress = `${SERVERS_IP}:10249`;
  mutate(c);
  return c;
}

describe('Daemon stopped while it starts', () => {
  it('closes what the default build made before `exited` resolves, and serves nothing', async () => {
    // With idling the build asks the source for its unidler halfway: the stop comes right then.
    let stopping: Promise<void> | undefined;
    let unidlerClosed = false;
    const d: Daemon = new Daemon({
      config: config((c) => {
        c.userspaceProxy.idling = true;
      }),
      logger: noopLogger,
      env: {},
      createSources: async (options) => {
        const sources = await createSources(options);
        sources.createUnidler = () => {
          stopping = d.stop('SIGTERM', { drain: false });
          return {
            needPods: () => {},
            close: async () => {
              unidlerClosed = true;
            },
          };
        };
        return sources;
      },
    });
    await d.start();
    expect(stopping).toBeDefined();
    expect(await d.exited).toBe(0);
    expect(unidlerClosed).toBe(true);
    expect(d.healthAddress()).toBeUndefined();
    expect(d.metricsAddress()).toBeUndefined();
  });

  it('waits for a proxier still being built, and shuts it down before `exited` resolves', async () => {
    let release: (p: Proxier) => void = () => {};
    const built = new Promise<Proxier>((resolve) => {
      release = resolve;
    });
    let asked = false;
    const calls: string[] = [];
    const proxier = {
      drain: async () => {
        calls.push('drain');
        return { remaining: 0, timedOut: false };
      },
      shutdown: async () => {
        calls.push('shutdown');
      },
    } as unknown as Proxier;
    const d = new Daemon({
      config: config(),
      logger: noopLogger,
      env: {},
      createProxier: () => {
        asked = true;
        return built;
      },
    });
    let started = false;
    const starting = d.start().then(() => {
      started = true;
    });
    await until(() => asked, 'the build to begin');
    void d.exited.then(() => calls.push('exited'));
    const stopped = d.stop('SIGTERM').then(() => calls.push('stopped'));
    expect(started).toBe(false);
    release(proxier); // however late the build ends, the stop waits for it
    await starting;
    await stopped;
    expect(await d.exited).toBe(0);
    expect(calls).toEqual(['drain', 'shutdown', 'exited', 'stopped']);
    expect(d.healthAddress()).toBeUndefined();
  });
});
