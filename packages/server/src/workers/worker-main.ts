import diagnosticsChannel from 'node:diagnostics_channel';
import { componentLogger } from '@userspace-proxy/core';
import { CHANNELS, type SyncMessage } from '@userspace-proxy/core/diagnostics';
import { Daemon } from '../daemon.js';
import { sharedProcessProfiler } from '../debug-profiling.js';
import { createDaemonLogger } from '../logging.js';
import { type FromWorker, isOurs, type ToWorker } from './protocol.js';
import { createWorkerSources, type WorkerSources } from './worker-sources.js';

/**
 * A `--workers` worker: the bin started by `node:cluster`. It waits for the primary's `up:init`,
 * then runs a daemon without HTTP servers whose sources are the primary's messages. It exits when
 * the primary asks (drain or stop) and, drain skipped, as soon as the primary is gone (the IPC
 * channel closes), so a killed primary never leaves a worker behind.
 */

/** Runs the worker until it stops; resolves with the exit code. */
export function runWorker(): Promise<number> {
  const send = (message: FromWorker) => {
    if (process.connected) process.send?.(message);
  };
  return new Promise<number>((resolve) => {
    let daemon: Daemon | undefined;
    let fed: WorkerSources | undefined;
    let stopping = false;
    /** The first stop drains unless `now`; a later `now` cuts a drain short (a second stop does). */
    const stop = (reason: string, now = false) => {
      if (daemon === undefined) resolve(0);
      else if (!stopping) {
        stopping = true;
        void daemon.stop(reason, { drain: !now });
      } else if (now) void daemon.stop(reason);
    };
    // The primary is gone: nobody serves the metrics or waits for a drain.
    process.on('disconnect', () => stop('the primary exited', true));
    // A signal to the whole process group (Ctrl-C, systemd) reaches the workers too: drain like
    // the primary asks; a second signal stops at once, as in a single process.
    const onSignal = (signal: NodeJS.Signals) => stop(signal, stopping);
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    process.on('message', (raw: unknown) => {
      if (!isOurs(raw)) return;
      const m = raw as ToWorker;
      if (fed?.apply(m)) return;
      switch (m.type) {
        case 'up:init': {
          // Idled and SCTP Services live in worker 1 only (placement.ts): the others run no idler
          // and no raw SCTP engine (two raw stacks on one address abort each other's associations).
          const config =
            m.index === 0
              ? m.config
              : {
                  ...m.config,
                  userspaceProxy: {
                    ...m.config.userspaceProxy,
                    idling: false,
                    sctpTransport: 'udp' as const,
                  },
                };
          const base = createDaemonLogger({
            format: config.logging.format,
            verbosity: config.logging.verbosity,
          });
          const logger = componentLogger(base, `worker-${m.index + 1}`);
          // The heap profile covers what was allocated since the start, as the primary's does.
          if (config.enableProfiling) sharedProcessProfiler(logger);
          fed = createWorkerSources(m, send, logger);
          const sources = fed.sources;
          const d = new Daemon({
            config,
            logger,
            servers: false,
            createSources: async () => sources,
          });
          daemon = d;
          const onSync = (msg: unknown) => {
            const s = msg as SyncMessage;
            send({ type: 'up:sync', durationMs: s.durationMs, servicePorts: s.servicePorts });
          };
          diagnosticsChannel.subscribe(CHANNELS.sync, onSync);
          d.exited.then((code) => {
            diagnosticsChannel.unsubscribe(CHANNELS.sync, onSync);
            resolve(code);
          });
          d.start().catch((err: unknown) => {
            logger.fatal(`cannot start: ${(err as Error).message}`);
            void d.stop('start failed', { exitCode: 1, drain: false });
          });
          return;
        }
        case 'up:request':
          void answer(m.id, m.what, daemon, send);
          return;
        case 'up:profile':
          void profile(m, send);
          return;
        case 'up:profile-stop':
          profiles.get(m.id)?.abort();
          return;
        case 'up:drain':
          // Already stopping (a signal to the whole group): the drain goes on as it is.
          stop('the primary is stopping');
          return;
        case 'up:stop-now':
          stop('the primary is stopping now', true);
          return;
        default:
          return;
      }
    });
    send({ type: 'up:ready' });
  });
}

async function answer(
  id: number,
  what: 'metrics' | 'status',
  daemon: Daemon | undefined,
  send: (message: FromWorker) => void,
): Promise<void> {
  try {
    if (daemon === undefined) throw new Error('not started');
    const body =
      what === 'metrics' ? await daemon.metrics.registry.getMetricsAsJSON() : await daemon.status();
    send({ type: 'up:response', id, body });
  } catch (err) {
    send({ type: 'up:response', id, body: null, error: (err as Error).message });
  }
}

/** The CPU profiles running for the primary, by request id (stopped when its client leaves). */
const profiles = new Map<number, AbortController>();

async function profile(
  m: Extract<ToWorker, { type: 'up:profile' }>,
  send: (message: FromWorker) => void,
): Promise<void> {
  const stop = new AbortController();
  profiles.set(m.id, stop);
  try {
    const profiler = sharedProcessProfiler();
    const body =
      m.kind === 'cpu'
        ? await profiler.cpuProfile(m.seconds, stop.signal)
        : await profiler.heapProfile();
    send({ type: 'up:response', id: m.id, body });
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    send({
      type: 'up:response',
      id: m.id,
      body: null,
      error: (err as Error).message,
      ...(typeof code === 'string' ? { code } : {}),
    });
  } finally {
    profiles.delete(m.id);
  }
}
