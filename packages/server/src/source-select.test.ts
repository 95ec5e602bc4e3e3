import { noopLogger } from '@userspace-proxy/core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FakeApiServer } from '../../kubernetes/src/test-support/fake-apiserver.js';
import { recordingLogger, service } from '../../kubernetes/src/test-support/helpers.js';
import { DEFAULT_LIST_LIMITS_CONFIG, defaultConfiguration } from './config-schema.js';
import { createSources } from './source-select.js';
import type { KubernetesSourcesOptions } from './sources.js';
import { until } from './test-support/wait.js';

// `userspaceProxy.listLimits` reaches the cluster source's list pager.
let server: FakeApiServer | undefined;
let stop: AbortController;

beforeEach(() => {
  stop = new AbortController();
});

afterEach(async () => {
  stop.abort();
  await server?.close();
  server = undefined;
});

function configWith(
  limits: Partial<ReturnType<typeof defaultConfiguration>['userspaceProxy']['listLimits']>,
) {
  const config = defaultConfiguration();
  Object.assign(config.userspaceProxy.listLimits, limits);
  return config;
}

describe('createSources on a cluster', () => {
  it('gives the cluster source the list caps of the configuration', async () => {
    let got: KubernetesSourcesOptions | undefined;
    await createSources({
      config: configWith({ maxPages: 7, requestDeadline: 5000 }),
      master: 'https://api.example:6443',
      nodeName: 'n1',
      logger: noopLogger,
      env: {},
      clusterSource: async (options) => {
        got = options;
        return { services: {} as never, run: async () => {} };
      },
    });
    const { requestTimeout, requestDeadline: _default, ...caps } = DEFAULT_LIST_LIMITS_CONFIG;
    expect(got?.informerOptions?.list).toEqual({
      ...caps,
      maxPages: 7,
      requestTimeoutMs: requestTimeout,
      requestDeadlineMs: 5000,
    });
  });

  it('lists in pages of pageSize and refuses a list over maxItems, through the real package', async () => {
    const api = await FakeApiServer.start();
    server = api;
    for (const name of ['a', 'b', 'c'])
      api.store.create('services', service('shop', name, '10.96.0.1'));
    const { logger, lines } = recordingLogger();
    const sources = await createSources({
      config: configWith({ pageSize: 1, maxItems: 2 }),
      master: api.url,
      nodeName: 'n1',
      logger,
      env: {},
    });
    void sources.run(stop.signal).catch(() => {});
    await until(
      () => lines.warn.some((w) => w.includes('list of /api/v1/services exceeds 2 items')),
      'the list refused at maxItems',
    );
    const pages = api.requests.filter((r) => r.verb === 'list' && r.resource === 'services');
    expect(pages.length).toBeGreaterThanOrEqual(3);
    expect(new Set(pages.map((r) => r.query.get('limit')))).toEqual(new Set(['1']));
    expect(sources.services.hasSynced()).toBe(false);
  });
});
