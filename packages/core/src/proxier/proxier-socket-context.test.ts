import { describe, expect, it } from 'vitest';
import { noopLogger } from '../logger.js';
import type { Endpoints } from '../model/model.js';
import type { EndpointsChange } from '../sockets/proxy-socket.js';
import { FakeLoadBalancer } from '../test-support/fake-load-balancer.js';
import { EndpointsNotifier } from './endpoints-notifier.js';
import { ProxierSocketContext } from './proxier-socket-context.js';

const servicePort = { namespace: 'ns', name: 'a', port: 'p', protocol: 'TCP' as const };

function make(allowedSources?: readonly string[]) {
  const lb = new FakeLoadBalancer({ 'ns/a:p': ['10.1.0.1:80'] });
  const notifier = new EndpointsNotifier(lb, noopLogger);
  const context = new ProxierSocketContext({
    protocol: 'TCP',
    ip: '10.0.0.1',
    port: 80,
    servicePort,
    service: { metadata: { namespace: 'ns', name: 'a' }, spec: { ports: [] } },
    logger: noopLogger,
    loadBalancer: lb,
    notifier,
    allowedSources,
  });
  const handler = notifier.wrap({
    onEndpointsAdd: () => {},
    onEndpointsUpdate: () => {},
    onEndpointsDelete: () => {},
    onEndpointsSynced: () => {},
  });
  const ep: Endpoints = { metadata: { namespace: 'ns', name: 'a' }, subsets: [] };
  return { context, changed: () => handler.onEndpointsAdd(ep) };
}

describe('ProxierSocketContext', () => {
  it('makes one signal on first read and aborts it', () => {
    const { context } = make();
    const signal = context.signal;
    expect(context.signal).toBe(signal);
    expect(signal.aborted).toBe(false);
    context.abort();
    expect(signal.aborted).toBe(true);
    context.abort();
  });

  it('hands out an aborted signal when aborted before anyone asked', () => {
    const { context } = make();
    context.abort();
    expect(context.signal.aborted).toBe(true);
  });

  it('pushes endpoint changes until unsubscribed or aborted', () => {
    const { context, changed } = make();
    const heard: EndpointsChange[] = [];
    const off = context.onEndpointsChanged((c) => heard.push(c));
    const other: EndpointsChange[] = [];
    context.onEndpointsChanged((c) => other.push(c));
    changed();
    expect(heard).toEqual([{ servicePort, hasEndpoints: true }]);
    off();
    changed();
    expect(heard).toHaveLength(1);
    expect(other).toHaveLength(2);
    context.abort();
    changed();
    expect(other).toHaveLength(2);
    // Subscribing after the abort hears nothing.
    context.onEndpointsChanged((c) => other.push(c));
    changed();
    expect(other).toHaveLength(2);
  });

  it('subscribes without making a signal (the native sockets subscribe on every listener)', () => {
    const { context, changed } = make();
    const Original = globalThis.AbortController;
    let made = 0;
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        made++;
      }
    };
    try {
      const heard: EndpointsChange[] = [];
      context.onEndpointsChanged((c) => heard.push(c));
      changed();
      context.abort();
      changed();
      expect(heard).toHaveLength(1);
      expect(made).toBe(0);
    } finally {
      globalThis.AbortController = Original;
    }
  });

  it('has allowedSources only when some were given', () => {
    expect('allowedSources' in make().context).toBe(false);
    expect('allowedSources' in make([]).context).toBe(false);
    expect(make(['10.0.0.0/8']).context.allowedSources).toEqual(['10.0.0.0/8']);
  });
});
