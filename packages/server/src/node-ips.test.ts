import { type Logger, type Service, StaticInformer } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import { defaultConfiguration, type KubeProxyConfiguration } from './config-schema.js';
import { sourceNodeIPs, watchNodeIPs } from './node-ips.js';
import type { ProxySources } from './sources.js';

/** A logger that keeps "level message" lines. */
function capture(): { logger: Logger; lines: string[] } {
  const lines: string[] = [];
  const at =
    (level: string) =>
    (...args: unknown[]) =>
      lines.push(`${level} ${String(args[0])}`);
  const logger: Logger = {
    silly: at('silly'),
    trace: at('trace'),
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    fatal: at('fatal'),
    getSubLogger: () => logger,
  };
  return { logger, lines };
}

/** A cluster-like source whose Node appears when the test says so. */
function clusterSource(): ProxySources & {
  setNode(ips: string[] | undefined): void;
  waits: number;
} {
  let ips: string[] | undefined;
  const listeners = new Set<() => void>();
  const source = {
    waits: 0,
    services: new StaticInformer<Service>(),
    nodeIPs: () => ips ?? [],
    run: async () => {},
    setNode(next: string[] | undefined) {
      ips = next;
      for (const l of [...listeners]) l();
    },
    onNodeChange(listener: () => void) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    waitForNode(signal: AbortSignal, timeoutMs: number): Promise<boolean> {
      source.waits++;
      return new Promise((resolve) => {
        if (ips !== undefined) return resolve(true);
        const timer = setTimeout(() => finish(false), timeoutMs);
        const finish = (known: boolean) => {
          clearTimeout(timer);
          listeners.delete(onChange);
          resolve(known);
        };
        const onChange = () => finish(true);
        listeners.add(onChange);
        signal.addEventListener('abort', () => finish(false), { once: true });
      });
    },
  };
  return source;
}

function primary(mutate: (c: KubeProxyConfiguration) => void = () => {}): KubeProxyConfiguration {
  const c = defaultConfiguration();
  c.nodePortAddresses = ['primary'];
  mutate(c);
  return c;
}

describe('sourceNodeIPs', () => {
  it('waits for the Node when "primary" needs its IPs, saying what it waits for', async () => {
    const sources = clusterSource();
    const { logger, lines } = capture();
    const ac = new AbortController();
    const pending = sourceNodeIPs({
      config: primary(),
      sources,
      nodeName: 'n1',
      signal: ac.signal,
      logger,
    });
    expect(lines).toEqual([
      'info waiting up to 30s for Node n1: its IPs are where "primary" node ports are served',
    ]);
    sources.setNode(['192.0.2.10']);
    expect(await pending).toEqual(['192.0.2.10']);
    expect(lines).toHaveLength(1);
  });

  it('does not wait when nothing needs the Node’s IPs, or they are known', async () => {
    const ac = new AbortController();
    for (const config of [
      defaultConfiguration(),
      primary((c) => {
        c.bindAddress = '10.0.0.5';
      }),
    ]) {
      const sources = clusterSource();
      const options = {
        config,
        sources,
        nodeName: 'n1',
        signal: ac.signal,
        logger: capture().logger,
      };
      expect(await sourceNodeIPs(options)).toBeUndefined();
      sources.setNode(['192.0.2.10']);
      expect(await sourceNodeIPs(options)).toEqual(['192.0.2.10']);
      expect(sources.waits).toBe(0);
    }
    const manifest: ProxySources = { services: new StaticInformer<Service>(), run: async () => {} };
    const options = { config: primary(), sources: manifest, nodeName: 'n1', signal: ac.signal };
    expect(await sourceNodeIPs({ ...options, logger: capture().logger })).toBeUndefined();
  });

  it('gives up after nodeWaitTimeout and names the detected addresses it falls back to', async () => {
    const sources = clusterSource();
    const { logger, lines } = capture();
    const config = primary((c) => {
      c.userspaceProxy.nodeWaitTimeout = 50;
    });
    const ac = new AbortController();
    const options = { config, sources, nodeName: 'n1', signal: ac.signal, logger };
    const ips = await sourceNodeIPs({ ...options, detectIPs: () => ['10.1.2.3'] });
    expect(ips).toBeUndefined();
    expect(lines[1]).toBe(
      'warn Node n1 was not seen within 50ms; "primary" node ports are served on the addresses detected from the interfaces (10.1.2.3) until its IPs are known, then the daemon restarts if they differ',
    );
  });

  it('does not wait at all with nodeWaitTimeout 0, and ends the wait when the daemon stops', async () => {
    const sources = clusterSource();
    const { logger, lines } = capture();
    const ac = new AbortController();
    const none = primary((c) => {
      c.userspaceProxy.nodeWaitTimeout = 0;
    });
    const base = { sources, nodeName: 'n1', logger, detectIPs: () => [] };
    expect(await sourceNodeIPs({ ...base, config: none, signal: ac.signal })).toBeUndefined();
    expect(sources.waits).toBe(0);
    expect(lines).toEqual([
      'warn Node n1 was not seen; "primary" node ports are served on the addresses detected from the interfaces (none) until its IPs are known, then the daemon restarts if they differ',
    ]);
    const pending = sourceNodeIPs({ ...base, config: primary(), signal: ac.signal });
    ac.abort();
    expect(await pending).toBeUndefined();
    expect(lines).toHaveLength(2); // the "waiting" line; no warning for a stop
  });
});

describe('watchNodeIPs', () => {
  it('asks for one restart when the Node’s IPs differ from those served, and only then', () => {
    const sources = clusterSource();
    const reasons: string[] = [];
    const { logger, lines } = capture();
    const stop = watchNodeIPs({
      config: primary(),
      sources,
      used: ['192.0.2.10', 'fd00::10'],
      logger,
      restart: (reason) => reasons.push(reason),
    });
    sources.setNode(['fd00::10', '192.0.2.10']); // the same set
    sources.setNode(undefined); // deleted: the last known addresses keep serving
    sources.setNode([]);
    expect(reasons).toEqual([]);
    sources.setNode(['192.0.2.11']);
    sources.setNode(['192.0.2.12']);
    expect(reasons).toEqual(['node IPs changed']);
    expect(lines).toEqual([
      'warn the node IPs are now 192.0.2.11, not 192.0.2.10, fd00::10; restarting so that "primary" node ports follow them',
    ]);
    stop();
  });

  it('ignores the Node when "primary" is not used, or a bind address names the node IP', () => {
    for (const config of [
      defaultConfiguration(),
      primary((c) => {
        c.bindAddress = '10.0.0.5';
      }),
    ]) {
      const sources = clusterSource();
      const reasons: string[] = [];
      watchNodeIPs({
        config,
        sources,
        used: ['10.0.0.5'],
        logger: capture().logger,
        restart: (reason) => reasons.push(reason),
      });
      sources.setNode(['192.0.2.99']);
      expect(reasons).toEqual([]);
    }
  });
});
