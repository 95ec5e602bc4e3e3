/**
 * A redirect-mode Proxier with the real iptables PortalManager and conntrack cleaner, in a process of
 * its own so that it runs inside the network namespace a test made ("the node"):
 * `ip netns exec NS node --conditions=@userspace-proxy/source --import tsx redirect-child.ts NODE_IP`.
 * It starts a TCP and a UDP echo server on NODE_IP (the endpoints; each answers "tcp:<data>" /
 * "udp:<data>"), then reads one JSON command per line on stdin and answers one JSON line on stdout:
 *
 * - first, unasked: `{"ready":true,"tcp":PORT,"udp":PORT}` once the Proxier's first sync ran;
 * - `{"id","cmd":"service","service":{…}}`: add (or update) a Service; answered after the sync
 *   that applied it, with `infos` (every proxied Service port: protocol, portal, proxyPort, nodePort);
 * - `{"id","cmd":"deleteService","namespace","name"}`: the same for a deletion; the answer comes
 *   after the sync's conntrack clean-up, so a test may read `conntrack -L` at once;
 * - `{"id","cmd":"endpoints","endpoints":{…}}`: add or update Endpoints (no sync: answered at once);
 * - `{"id","cmd":"shutdown"}`: `Proxier.shutdown()`, answered, then the process exits 0.
 *
 * Failures are answered as `{"id","error":"…"}`; stdin closing shuts the Proxier down and exits.
 * Every event the Proxier records is printed as `{"event":{type,reason,message}}`, every refused
 * client as `{"refused":reason}`; logs (debug and up) go to stderr.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { createInterface } from 'node:readline';
import type { Endpoints, Service } from '@userspace-proxy/core';
import { createLogger, EmitterEventRecorder, newProxier } from '@userspace-proxy/core';
import { CHANNELS } from '@userspace-proxy/core/diagnostics';
import { startTcpServer, startUdpEchoServer } from '../../../core/src/test-support/echo-servers.js';
import { ExecConntrackCleaner } from '../conntrack-exec.js';
import { IptablesPortalManager } from '../portal-manager-iptables.js';

/** How long one command may wait for its sync before it is answered with an error. */
const SYNC_DEADLINE_MS = 15_000;

const [nodeIP = '0.0.0.0'] = process.argv.slice(2);
const say = (value: unknown): void => {
  process.stdout.write(`${JSON.stringify(value)}\n`);
};
const keyOf = (o: { metadata: { namespace?: string; name: string } }): string =>
  `${o.metadata.namespace ?? 'default'}/${o.metadata.name}`;

const logger = createLogger({ name: 'redirect-child', minLevel: 2, format: 'pretty' });
const recorder = new EmitterEventRecorder();
recorder.on('event', ({ type, reason, message }) => say({ event: { type, reason, message } }));

const tcp = await startTcpServer({
  host: nodeIP,
  onConnection: (socket) => {
    socket.on('data', (data: Buffer) => socket.write(`tcp:${data.toString()}`));
    socket.on('end', () => socket.end());
  },
});
const udp = await startUdpEchoServer({ host: nodeIP, prefix: 'udp:' });

// A command waits for the first sync, after its handler call, that leaves nothing pending.
const waiters: (() => void)[] = [];
const proxier = await newProxier({
  mode: 'redirect',
  listenIP: '0.0.0.0',
  portals: new IptablesPortalManager({ logger }),
  conntrack: new ExecConntrackCleaner({ logger }),
  minSyncPeriodMs: 0,
  syncPeriodMs: 60_000,
  recorder,
  logger,
});
// Refusals as `{"refused":reason}`, so a test counts source-range refusals where they happen.
diagnosticsChannel.subscribe(CHANNELS.refused, (message) => {
  say({ refused: (message as { reason: string }).reason });
});
diagnosticsChannel.subscribe(CHANNELS.sync, () => {
  if (proxier.pendingChanges() !== 0) return;
  for (const resolve of waiters.splice(0)) resolve();
});

/** Runs `action` (a handler call) and resolves once a sync has applied everything pending. */
function applied(action: () => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no sync within ${SYNC_DEADLINE_MS} ms`)),
      SYNC_DEADLINE_MS,
    );
    waiters.push(() => {
      clearTimeout(timer);
      resolve();
    });
    action();
  });
}

function infos() {
  return proxier.serviceInfos().map((info) => ({
    service: `${info.serviceRef.namespace}/${info.serviceRef.name}`,
    protocol: info.protocol,
    portal: info.portal,
    proxyPort: info.proxyPort,
    nodePort: info.nodePort,
  }));
}

const services = new Map<string, Service>();
const endpoints = new Map<string, Endpoints>();

interface Command {
  id: number;
  cmd: string;
  service?: Service;
  endpoints?: Endpoints;
  namespace?: string;
  name?: string;
}

async function handle(command: Command): Promise<Record<string, unknown>> {
  switch (command.cmd) {
    case 'service': {
      const service = command.service as Service;
      const old = services.get(keyOf(service));
      services.set(keyOf(service), service);
      await applied(() =>
        old ? proxier.onServiceUpdate(old, service) : proxier.onServiceAdd(service),
      );
      return { infos: infos() };
    }
    case 'deleteService': {
      const key = `${command.namespace ?? 'default'}/${command.name}`;
      const old = services.get(key);
      if (!old) throw new Error(`no Service ${key}`);
      services.delete(key);
      await applied(() => proxier.onServiceDelete(old));
      return { infos: infos() };
    }
    case 'endpoints': {
      const eps = command.endpoints as Endpoints;
      const old = endpoints.get(keyOf(eps));
      endpoints.set(keyOf(eps), eps);
      if (old) proxier.onEndpointsUpdate(old, eps);
      else proxier.onEndpointsAdd(eps);
      return {};
    }
    case 'shutdown':
      await proxier.shutdown();
      await Promise.all([tcp.close(), udp.close()]);
      return {};
    default:
      throw new Error(`unknown command ${command.cmd}`);
  }
}

void proxier.syncLoop();
await applied(() => {
  proxier.onServiceSynced();
  proxier.onEndpointsSynced();
});
say({ ready: true, tcp: tcp.port, udp: udp.port });

// One command at a time, in order: each answer describes the state its command left.
let queue = Promise.resolve();
const input = createInterface({ input: process.stdin });
// The test process is gone (stdin closed without a shutdown): take the rules down and go too.
input.on('close', () => {
  queue = queue.then(async () => {
    await proxier.shutdown().catch(() => undefined);
    process.exit(0);
  });
});
input.on('line', (line) => {
  queue = queue.then(async () => {
    let command: Command;
    try {
      command = JSON.parse(line) as Command;
    } catch {
      say({ error: `not JSON: ${line}` });
      return;
    }
    try {
      say({ id: command.id, ...(await handle(command)) });
      if (command.cmd === 'shutdown') process.stdout.end(() => process.exit(0));
    } catch (error) {
      say({ id: command.id, error: String((error as Error)?.stack ?? error) });
    }
  });
});
