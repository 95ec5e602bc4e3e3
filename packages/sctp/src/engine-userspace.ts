/**
 * The default {@link SctpEngine}: this package's TypeScript SCTP over RFC 6951 UDP encapsulation,
 * its UDP sockets node:dgram's (`udpIo: 'node'`, the default) or a C helper's that moves datagrams
 * in batches (`udpIo: 'helper'`, transport-udp-helper.ts).
 */
import { isIPv6 } from 'node:net';
import type { Association } from './association.js';
import type { SctpEndpoint, SctpEndpointCounters } from './endpoint.js';
import { random32 } from './endpoint.js';
import {
  DEFAULT_ENCAPSULATION_PORT,
  type SctpAssociation,
  type SctpConnectOptions,
  type SctpEngine,
  type SctpListener,
  type SctpListenOptions,
} from './engine.js';
import { EngineListener } from './engine-listener.js';
import { SctpConnectError, SctpError } from './errors.js';
import {
  type ResolvedAssociationOptions,
  resolveAssociationOptions,
  type SctpAssociationOptions,
} from './options.js';
import { defaultTimers, type SctpTimers } from './timers.js';
import { nodeUdpSockets, UdpEndpointPool, type UdpSocketProvider } from './transport-udp.js';
import {
  HelperUdpSockets,
  type UdpHelperCounters,
  type UdpHelperOptions,
} from './transport-udp-helper.js';

/** Options of the userspace engine. */
export interface UserspaceSctpEngineOptions {
  /** Clock and timers. Default: the event loop's. */
  readonly timers?: SctpTimers;
  /** Defaults for every association (each listen / connect may override). */
  readonly association?: SctpAssociationOptions;
  /** SO_RCVBUF / SO_SNDBUF per UDP socket. Default 4 MiB (the kernel may cap it). */
  readonly udpBufferBytes?: number;
  /** Replies without an association (INIT ACK, OOTB ABORT) per second per socket. Default 1000. */
  readonly replyRate?: number;
  /** Receives contained errors and refusals, already truncated and escaped. */
  readonly onWarning?: (message: string) => void;
  /**
   * Who moves the UDP datagrams. `'node'` (the default): node:dgram, one callback, Buffer and
   * system call per datagram. `'helper'`: a C helper process (`native/sctp-udp-helper.c`, built
   * with the system's `cc` on first use) that reads and writes them in batches (recvmmsg /
   * sendmmsg) and checks and writes their CRC32c; without a compiler (or `udpHelper.helperPath`)
   * the first listen / connect fails with `ERR_SCTP_UDP_HELPER`. docs/sctp.md "Transport".
   */
  readonly udpIo?: 'node' | 'helper';
  /** How the helper of `udpIo: 'helper'` is built, run and bounded. */
  readonly udpHelper?: UdpHelperOptions;
}

/** Makes the default engine. */
export function createUserspaceSctpEngine(options: UserspaceSctpEngineOptions = {}): SctpEngine {
  return new UserspaceSctpEngine(options);
}

/** See the module comment. */
export class UserspaceSctpEngine implements SctpEngine {
  private readonly pool: UdpEndpointPool;
  private readonly defaults: SctpAssociationOptions;
  private readonly sockets: UdpSocketProvider;

  constructor(options: UserspaceSctpEngineOptions = {}) {
    this.defaults = options.association ?? {};
    const io = options.udpIo ?? 'node';
    if (io !== 'node' && io !== 'helper')
      throw new RangeError(`SCTP option udpIo must be 'node' or 'helper', got ${String(io)}`);
    this.sockets =
      io === 'helper'
        ? new HelperUdpSockets({
            ...(options.onWarning ? { onWarning: options.onWarning } : {}),
            ...options.udpHelper,
          })
        : nodeUdpSockets;
    this.pool = new UdpEndpointPool({
      sockets: this.sockets,
      timers: options.timers ?? defaultTimers,
      ...(options.udpBufferBytes !== undefined ? { udpBufferBytes: options.udpBufferBytes } : {}),
      ...(options.replyRate !== undefined ? { replyRate: options.replyRate } : {}),
      ...(options.onWarning ? { onWarning: options.onWarning } : {}),
    });
    resolveAssociationOptions(this.defaults);
  }

  /** Which datagram I/O this engine runs on. */
  get udpIo(): 'node' | 'helper' {
    return this.sockets instanceof HelperUdpSockets ? 'helper' : 'node';
  }

  /** The UDP helper's counters (`udpIo: 'helper'`), else undefined. */
  get udpHelperCounters(): Readonly<UdpHelperCounters> | undefined {
    return this.sockets instanceof HelperUdpSockets ? { ...this.sockets.counters } : undefined;
  }

  /** The running UDP helper's process id (its CPU time is the engine's too), else undefined. */
  get udpHelperPid(): number | undefined {
    return this.sockets instanceof HelperUdpSockets ? this.sockets.pid : undefined;
  }

  /** Each open UDP endpoint's counters (the guard's refusals per reason, contained exceptions, ...). */
  async endpointCounters(): Promise<
    Array<{ address: string; port: number; counters: SctpEndpointCounters }>
  > {
    return (await this.pool.all()).map((ep) => ({
      address: ep.localAddress,
      port: ep.localEncapsulationPort,
      counters: ep.counters,
    }));
  }

  /**
   * Starts the UDP helper now (`udpIo: 'helper'`; listen and connect do it anyway), so a missing
   * compiler shows at start-up; nothing to do for node:dgram.
   */
  async start(): Promise<void> {
    if (this.sockets instanceof HelperUdpSockets) await this.sockets.start();
  }

  private resolve(o: SctpAssociationOptions | undefined): ResolvedAssociationOptions {
    return resolveAssociationOptions({ ...this.defaults, ...o });
  }

  async listen(o: SctpListenOptions): Promise<SctpListener> {
    const opts = this.resolve(o.association);
    const ep = await this.pool.acquire(
      o.address,
      o.encapsulationPort ?? DEFAULT_ENCAPSULATION_PORT,
    );
    try {
      const port = o.port === 0 ? pickPort(ep) : o.port;
      if (!Number.isInteger(port) || port < 1 || port > 65535)
        throw new RangeError(`SCTP port ${port} is not within 1..65535`);
      const l = new EngineListener(
        ep,
        o.address,
        port,
        ep.localEncapsulationPort,
        opts,
        o.maxAssociations ?? 1024,
        o.maxAssociationsPerAddress,
      );
      if (!ep.addPortListener(port, l)) {
        throw new SctpError(
          'ERR_SCTP_PORT_IN_USE',
          `SCTP port ${port} on ${o.address}:${ep.localEncapsulationPort} already has a listener`,
        );
      }
      return l;
    } finally {
      ep.release();
    }
  }

  async connect(o: SctpConnectOptions): Promise<SctpAssociation> {
    o.signal?.throwIfAborted();
    const target = `${o.address}:${o.port}`;
    const opts = this.resolve(o.association);
    const localAddress = o.localAddress ?? (isIPv6(o.address) ? '::' : '0.0.0.0');
    const remoteEncapsulationPort = o.encapsulationPort ?? DEFAULT_ENCAPSULATION_PORT;
    const ep =
      o.connectedSocket === true && o.localEncapsulationPort === undefined
        ? await this.pool.connected(localAddress, o.address, remoteEncapsulationPort)
        : await this.pool.acquire(localAddress, o.localEncapsulationPort ?? 0);
    let a: Association;
    try {
      o.signal?.throwIfAborted();
      const localPort = o.localPort ?? pickPort(ep);
      a = ep.connect(opts, o.address, o.port, remoteEncapsulationPort, localPort);
    } finally {
      ep.release();
    }
    return new Promise<SctpAssociation>((resolve, reject) => {
      const onAbort = (): void => {
        a.abort('connect aborted');
      };
      o.signal?.addEventListener('abort', onAbort, { once: true });
      a.once('established', () => {
        o.signal?.removeEventListener('abort', onAbort);
        a.off('close', onClose);
        resolve(a);
      });
      const onClose = (info: { detail: string }): void => {
        o.signal?.removeEventListener('abort', onAbort);
        if (o.signal?.aborted) reject(o.signal.reason);
        else reject(new SctpConnectError(target, info.detail));
      };
      a.once('close', onClose);
    });
  }

  async close(): Promise<void> {
    await Promise.all((await this.pool.all()).map((ep) => ep.close()));
    await this.sockets.close?.();
  }
}

function pickPort(ep: SctpEndpoint): number {
  for (let i = 0; i < 64; i++) {
    const port = 49152 + (random32() % 16384);
    if (!ep.portInUse(port)) return port;
  }
  throw new SctpError('ERR_SCTP_NO_PORT', 'no free SCTP port found in 49152..65535');
}
