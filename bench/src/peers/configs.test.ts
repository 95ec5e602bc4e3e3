import { describe, expect, it } from 'vitest';
import { PeersUsageError, parsePeersArgs } from './cli.js';
import {
  daemonConfig,
  daemonServices,
  haproxyConfig,
  nginxHttpBackendConfig,
  nginxStreamConfig,
  randomLayout,
} from './configs.js';
import { isListening, procNetAddress } from './subjects.js';

const layout = randomLayout(() => 0.5);

describe('configs of the servers the benchmark starts', () => {
  it('puts everything on one random 127.x.y.0/24', () => {
    expect(layout).toEqual({
      backend: '127.80.128.2',
      peers: {
        haproxy: '127.80.128.3',
        nginx: '127.80.128.4',
        naive: '127.80.128.5',
        daemon: '127.80.128.6',
        daemon2: '127.80.128.7',
        native: '127.80.128.8',
      },
    });
    const a = randomLayout();
    expect(a.backend).toMatch(/^127\.(6\d|7\d|8\d|9\d)\.\d{1,3}\.2$/);
  });

  it('listens only on loopback addresses', () => {
    const configs = [
      haproxyConfig(layout),
      nginxStreamConfig(layout, '/tmp/x', '/m.so'),
      nginxHttpBackendConfig(layout, '/tmp/x'),
      daemonConfig(layout),
    ];
    for (const text of configs) {
      const pattern = /(?:^\s*bind|\{ listen|^\s*\w*[bB]indAddress:)\s+([^\s;]+)/gm;
      const binds = [...text.matchAll(pattern)].map((m) => m[1]);
      expect(binds.length).toBeGreaterThan(0);
      for (const b of binds) expect(b, text).toMatch(/^127\.80\.128\.\d+(:\d+)?$/);
    }
  });

  it('gives nginx stream 2 workers with reuseport, TCP and UDP', () => {
    const conf = nginxStreamConfig(layout, '/tmp/x', '/m.so');
    expect(conf).toContain('worker_processes 2;');
    expect(conf).toContain('load_module /m.so;');
    expect(conf).toContain('listen 127.80.128.4:5201 udp reuseport;');
    expect(conf).toContain(
      'listen 127.80.128.4:9000 reuseport backlog=4096; proxy_pass 127.80.128.2:9000;',
    );
    expect(haproxyConfig(layout)).toContain('  mode tcp\n');
  });

  it('describes one Service with every port for the daemon, endpoint the backend', () => {
    const manifest = daemonServices(layout);
    expect(manifest).toContain('clusterIP: 127.80.128.6');
    expect(manifest).toContain(
      '{ name: udp-11111, protocol: UDP, port: 11111, targetPort: 11111 }',
    );
    expect(manifest).toContain('addresses: ["127.80.128.2"]');
    expect(daemonConfig(layout)).toContain('mode: service-port-portal');
  });
});

describe('/proc/net readiness', () => {
  it('matches the little-endian hex address and the listening state', () => {
    expect(procNetAddress('127.80.128.2', 5201)).toBe('0280507F:1451');
    const table = [
      '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
      '   0: 0280507F:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1',
      '   1: 0280507F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 2 1',
    ].join('\n');
    expect(isListening('tcp', '127.80.128.2', 5201, table)).toBe(true);
    expect(isListening('tcp', '127.80.128.2', 8080, table)).toBe(false);
    expect(isListening('udp', '127.80.128.2', 5201, table)).toBe(false);
  });
});

describe('command line', () => {
  it('defaults to 3 repetitions, 1 with --quick, and reads every option', () => {
    expect(parsePeersArgs(['--peers']).run.reps).toBe(3);
    expect(parsePeersArgs(['--peers', '--quick']).run.reps).toBe(1);
    const a = parsePeersArgs([
      '--peers',
      '--quick',
      '--reps',
      '2',
      '--write',
      '--only',
      'bulk,ping',
      '--subjects',
      'daemon',
      '--daemon-arg',
      '-v',
      '--daemon-arg',
      '2',
      '--daemon-node-arg',
      '--optimize-for-size',
      '--no-install',
      '--no-build',
      '--note',
      'quiet machine',
    ]);
    expect(parsePeersArgs(['--peers', '--json', 'r.json']).json).toBe('r.json');
    expect(parsePeersArgs(['--peers', '--render', 'r.json']).render).toBe('r.json');
    expect(a).toEqual({
      run: {
        reps: 2,
        quick: true,
        only: ['bulk', 'ping'],
        peers: ['daemon'],
        install: false,
        daemonArgs: ['-v', '2'],
        daemonNodeArgs: ['--optimize-for-size'],
      },
      write: true,
      build: false,
      note: 'quiet machine',
      help: false,
      json: '',
      render: '',
    });
  });

  it('refuses what it does not know', () => {
    expect(() => parsePeersArgs(['--peers', '--reps', '0'])).toThrow(PeersUsageError);
    expect(() => parsePeersArgs(['--peers', '--reps'])).toThrow(/needs a value/);
    expect(() => parsePeersArgs(['--peers', '--only', 'bulk,disk'])).toThrow(
      /"disk" is not one of/,
    );
    expect(() => parsePeersArgs(['--peers', '--subjects', 'envoy'])).toThrow(PeersUsageError);
    expect(() => parsePeersArgs(['--peers', '--bogus'])).toThrow(/unknown argument "--bogus"/);
  });
});
