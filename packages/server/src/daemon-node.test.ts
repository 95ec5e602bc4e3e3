import {
  type EndpointSlice,
  type Logger,
  newProxier,
  noopLogger,
  type ProxierOptions,
  type Service,
  StaticInformer,
} from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { Daemon } from './daemon.js';
import type { ProxySources } from './sources.js';
import { ask, type Backends, startBackends } from './test-support/backends.js';
import { loopbackBlock } from './test-support/loopback.js';
import { until } from './test-support/wait.js';

// The daemon and a cluster source whose Node arrives late: "primary" node ports need its IPs.
// Loopback addresses of this file only.
const NET = loopbackBlock(); // this file's own /24: see loopbackBlock
const SERVICE_IP = `${NET}1`;
const A = `${NET}2`;
const SERVERS_IP = `${NET}4`;
const NODE_IP = `${NET}9`;
const NEW_NODE_IP = `${NET}10`;
const NODE_PORT = 30_876;

let backends: Backends;
let daemon: Daemon | undefined;

beforeEach(async () => {
  backends = await startBackends({ A });
});

afterEach(async () => {
  if (daemon) {
    void daemon.stop('test over', { drain: false });
    await daemon.exited;
  }
  daemon = undefined;
  await backends.close();
});

/** A NodePort Service on SERVICE_IP with one endpoint, A. */
function objects(): { service: Service; slice: EndpointSlice } {
  return {
    service: {
      metadata: { name: 'web', namespace: 'default' },
      spec: {
        type: 'NodePort',
        clusterIP: SERVICE_IP,
        ports: [{ name: 'tcp', protocol: 'TCP', port: 8080, nodePort: NODE_PORT }],
      },
    },
    slice: {
      metadata: {
        name: 'web-1',
        namespace: 'default',
        labels: { 'kubernetes.io/service-name': 'web' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: [A], conditions: { ready: true } }],
      ports: [{ name: 'tcp', protocol: 'TCP', port: backends.port }],
    },
  };
}

/** A cluster source whose Node the test sets; `waited` records each waitForNode timeout. */
function lateNodeSource() {
  const services = new StaticInformer<Service>();
  const endpointSlices = new StaticInformer<EndpointSlice>();
  const listeners = new Set<() => void>();
  let ips: string[] | undefined;
  const waited: number[] = [];
  const sources: ProxySources = {
    services,
    endpointSlices,
    nodeIPs: () => ips ?? [],
    nodeEligible: () => ips !== undefined,
    onNodeChange(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    waitForNode(signal, timeoutMs) {
      waited.push(timeoutMs);
      return new Promise((resolve) => {
        const done = (known: boolean) => {
          listeners.delete(onChange);
          resolve(known);
        };
        const onChange = () => done(true);
        listeners.add(onChange);
        signal.addEventListener('abort', () => done(false), { once: true });
      });
    },
    run: async () => {
      const { service, slice } = objects();
      endpointSlices.replace([slice]);
      services.replace([service]);
    },
  };
  const setNode = (next: string[]) => {
    ips = next;
    for (const listener of [...listeners]) listener();
  };
  return { sources, setNode, waited };
}

function config(): KubeProxyConfiguration {
  const c = defaultConfiguration();
  c.healthzBindAddress = `${SERVERS_IP}:10256`;
  c.metricsBindAddress = `${SERVERS_IP}:10249`;
  c.iptables.minSyncPeriod = 0;
  c.nodePortAddresses = ['primary'];
  c.hostnameOverride = 'node-a';
  return c;
}

describe('Daemon with "primary" node ports and a cluster source', () => {
  it('waits for the Node before building the Proxier, serves its node port on the Node’s IP, and restarts when the IP changes', async () => {
    const { sources, setNode, waited } = lateNodeSource();
    const built: ProxierOptions[] = [];
    const warnings: string[] = [];
    const recording: Logger = {
      ...noopLogger,
      warn: (...args: unknown[]) => warnings.push(args.map(String).join(' ')),
      getSubLogger: () => recording,
    };
    const d = new Daemon({
      config: config(),
      master: 'http://127.0.0.1:1',
      logger: recording,
      env: {},
      listenRetryMs: 50,
      clusterSource: async () => sources,
      createProxier: (options) => {
        built.push(options);
        return newProxier(options);
      },
    });
    daemon = d;
    let started = false;
    const starting = d.start().then(() => {
      started = true;
    });
    await until(() => waited.length === 1, 'the wait for the Node');
    expect(waited).toEqual([30_000]);
    expect(built).toEqual([]); // nothing is built, nothing listens, before the Node is known
    expect(started).toBe(false);
    setNode([NODE_IP]);
    await starting;
    expect(built[0]?.nodeIPs).toEqual([NODE_IP]);
    await until(
      async () => (await ask(NODE_IP, NODE_PORT, 'np')) === 'A:np',
      'the node port on the Node IP',
    );
    expect(await ask(SERVICE_IP, 8080, 'c')).toBe('A:c');

    setNode([NODE_IP]); // an update with the same IPs changes nothing: it still serves
    expect(await ask(NODE_IP, NODE_PORT, 'np2')).toBe('A:np2');
    setNode([NEW_NODE_IP]);
    expect(await d.exited).toBe(1); // the supervisor starts it again, on the new IP
    // The one restart was for the new IP, not for the update that repeated the old one.
    const restarts = warnings.filter((w) => w.includes('restarting so that'));
    expect(restarts).toHaveLength(1);
    expect(restarts[0]).toContain(`now ${NEW_NODE_IP}, not ${NODE_IP}`);
    daemon = undefined;
  });

  it('stops cleanly while it waits for the Node', async () => {
    const { sources, waited } = lateNodeSource();
    const d = new Daemon({
      config: config(),
      master: 'http://127.0.0.1:1',
      logger: noopLogger,
      env: {},
      clusterSource: async () => sources,
    });
    daemon = d;
    const starting = d.start();
    await until(() => waited.length === 1, 'the wait for the Node');
    void d.stop('SIGTERM');
    await starting;
    expect(await d.exited).toBe(0);
    expect(d.healthAddress()).toBeUndefined();
    daemon = undefined;
  });
});
