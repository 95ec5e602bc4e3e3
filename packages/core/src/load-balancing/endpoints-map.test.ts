import { describe, expect, it } from 'vitest';
import type { Logger } from '../logger.js';
import type { Endpoints } from '../model/model.js';
import { spyLogger } from '../test-support/spy-logger.js';
import { buildPortsToEndpointsMap, isValidEndpointHost, isValidPort } from './endpoints-map.js';

const meta = { namespace: 'ns', name: 'svc' };

function build(subsets: unknown, logger?: Logger): Record<string, string[]> {
  return Object.fromEntries(
    buildPortsToEndpointsMap({ metadata: meta, subsets } as Endpoints, logger),
  );
}

describe('buildPortsToEndpointsMap', () => {
  it('gives an empty map for an object without subsets', () => {
    expect(buildPortsToEndpointsMap({ metadata: meta }).size).toBe(0);
    expect(build([])).toEqual({});
  });

  it('orders entries subsets × ports × addresses and accumulates port names', () => {
    expect(
      build([
        {
          addresses: [{ ip: '10.0.0.1' }, { ip: '10.0.0.2' }],
          ports: [
            { name: 'http', port: 80 },
            { name: 'https', port: 443 },
          ],
        },
        {
          addresses: [{ ip: '10.0.0.1' }, { ip: '10.0.0.3' }],
          ports: [
            { name: 'http', port: 8080 },
            { name: 'dns', port: 53 },
          ],
        },
        { addresses: [], ports: [{ name: 'http', port: 8888 }] },
        { addresses: [{ ip: '10.0.0.1' }], ports: [] },
        { addresses: [{ ip: '10.0.0.4' }], ports: [{ name: 'http', port: 80 }] },
      ]),
    ).toEqual({
      http: ['10.0.0.1:80', '10.0.0.2:80', '10.0.0.1:8080', '10.0.0.3:8080', '10.0.0.4:80'],
      https: ['10.0.0.1:443', '10.0.0.2:443'],
      dns: ['10.0.0.1:53', '10.0.0.3:53'],
    });
  });

  it('lists every port of a name, e.g. three ports named "p" on one address', () => {
    expect(
      build([
        {
          addresses: [{ ip: 'endpoint1' }],
          ports: [
            { name: 'p', port: 1 },
            { name: 'p', port: 2 },
            { name: 'p', port: 3 },
          ],
        },
      ]),
    ).toEqual({ p: ['endpoint1:1', 'endpoint1:2', 'endpoint1:3'] });
  });

  it('keys an unnamed port by ""', () => {
    expect(build([{ addresses: [{ ip: '10.0.0.1' }], ports: [{ port: 80 }] }])).toEqual({
      '': ['10.0.0.1:80'],
    });
  });

  it('ignores notReadyAddresses', () => {
    expect(
      build([
        {
          addresses: [{ ip: '10.0.0.1' }],
          notReadyAddresses: [{ ip: '10.0.0.2' }],
          ports: [{ name: 'p', port: 80 }],
        },
        { notReadyAddresses: [{ ip: '10.0.0.3' }], ports: [{ name: 'q', port: 80 }] },
      ]),
    ).toEqual({ p: ['10.0.0.1:80'] });
  });

  it('skips an empty ip and port 0, and leaves out names with no valid entry', () => {
    expect(
      build([
        {
          addresses: [{ ip: '' }, { ip: '10.0.0.1' }],
          ports: [
            { name: 'zero', port: 0 },
            { name: 'p', port: 80 },
          ],
        },
      ]),
    ).toEqual({ p: ['10.0.0.1:80'] });
  });

  it('brackets IPv6 endpoints', () => {
    expect(build([{ addresses: [{ ip: 'fd00::1' }], ports: [{ name: 'p', port: 80 }] }])).toEqual({
      p: ['[fd00::1]:80'],
    });
  });

  it('lists an endpoint once even when subsets repeat it', () => {
    expect(
      build([
        { addresses: [{ ip: '10.0.0.1' }, { ip: '10.0.0.1' }], ports: [{ name: 'p', port: 80 }] },
        { addresses: [{ ip: '10.0.0.1' }], ports: [{ name: 'p', port: 80 }] },
        { addresses: [{ ip: '10.0.0.1' }], ports: [{ name: 'p', port: 81 }] },
      ]),
    ).toEqual({ p: ['10.0.0.1:80', '10.0.0.1:81'] });
  });

  it('skips garbage addresses with a debug log and keeps the rest', () => {
    const logger = spyLogger();
    const bad = [
      'not an ip',
      'a/b',
      '1.2.3.999',
      'x.example.com',
      '-leading',
      'Upper',
      '10.0.0.1:80',
      42,
      null,
      {},
    ];
    expect(
      build(
        [
          {
            addresses: [...bad.map((ip) => ({ ip })), 'string-entry', null, { ip: '10.0.0.9' }],
            ports: [{ name: 'p', port: 80 }],
          },
        ],
        logger,
      ),
    ).toEqual({ p: ['10.0.0.9:80'] });
    expect(logger.debug).toHaveBeenCalledTimes(bad.length + 2);
    expect(String(logger.debug.mock.calls[0]?.[0])).toMatch(
      /Endpoints ns\/svc subsets\[0\]\.addresses\[0\]: invalid ip "not an ip"/,
    );
  });

  it('skips invalid ports with a debug log', () => {
    const logger = spyLogger();
    expect(
      build(
        [
          {
            addresses: [{ ip: '10.0.0.1' }],
            ports: [
              { name: 'big', port: 70_000 },
              { name: 'neg', port: -1 },
              { name: 'frac', port: 1.5 },
              { name: 'text', port: '80' },
              { name: 'nan', port: Number.NaN },
              { name: 7, port: 80 },
              null,
              { name: 'ok', port: 65_535 },
            ],
          },
        ],
        logger,
      ),
    ).toEqual({ ok: ['10.0.0.1:65535'] });
    expect(logger.debug).toHaveBeenCalledTimes(7);
  });

  it('survives wrong types anywhere', () => {
    const logger = spyLogger();
    expect(build('nope', logger)).toEqual({});
    expect(build({ 0: {} }, logger)).toEqual({});
    expect(
      build(
        [
          null,
          7,
          { addresses: 'x', ports: [{ name: 'p', port: 80 }] },
          { addresses: [{ ip: '10.0.0.1' }], ports: { name: 'p', port: 80 } },
          { addresses: [{ ip: '10.0.0.2' }], ports: [{ name: 'p', port: 80 }] },
        ],
        logger,
      ),
    ).toEqual({ p: ['10.0.0.2:80'] });
    for (const garbage of [null, undefined, 5, 'x', [], { metadata: 5, subsets: 5 }]) {
      expect(buildPortsToEndpointsMap(garbage as unknown as Endpoints).size).toBe(0);
    }
  });

  it('never throws on a hostile object, and keeps nothing of it', () => {
    const hostile = {
      metadata: meta,
      subsets: [
        { addresses: [{ ip: '10.0.0.1' }], ports: [{ name: 'p', port: 80 }] },
        {
          get addresses(): never {
            throw new Error('boom');
          },
          ports: [{ name: 'p', port: 81 }],
        },
      ],
    };
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(buildPortsToEndpointsMap(hostile as unknown as Endpoints).size).toBe(0);
    expect(buildPortsToEndpointsMap(proxy as unknown as Endpoints).size).toBe(0);
    expect(
      buildPortsToEndpointsMap({
        metadata: meta,
        subsets: [{ addresses: [{ ip: 10n }], ports: [{ name: 'p', port: 80 }] }],
      } as unknown as Endpoints).size,
    ).toBe(0);
  });

  it('does not modify its input', () => {
    const input: Endpoints = {
      metadata: meta,
      subsets: [{ addresses: [{ ip: '10.0.0.1' }], ports: [{ name: 'p', port: 80 }] }],
    };
    const copy = structuredClone(input);
    buildPortsToEndpointsMap(input);
    expect(input).toEqual(copy);
  });
});

describe('isValidEndpointHost / isValidPort', () => {
  it('accepts IP literals and DNS labels only', () => {
    for (const ok of ['10.0.0.1', 'fd00::1', '::ffff:10.0.0.1', 'endpoint1', 'a', 'a-b']) {
      expect(isValidEndpointHost(ok), ok).toBe(true);
    }
    for (const bad of ['', ' ', 'a b', 'a_b', 'a.b', '256.1.1.1', 'x'.repeat(64), '[::1]', 3]) {
      expect(isValidEndpointHost(bad), String(bad)).toBe(false);
    }
  });

  it('accepts integer ports 1..65535', () => {
    expect([1, 80, 65_535].every(isValidPort)).toBe(true);
    expect([0, -1, 65_536, 1.5, '80', Number.NaN, null].some(isValidPort)).toBe(false);
  });
});
