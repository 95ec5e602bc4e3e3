/**
 * The SCTP proxy socket: accepts associations on a Service portal (RFC 6951 UDP encapsulation),
 * dials an endpoint the load balancer picks (ClientIP affinity honoured, the TCP dial schedule with
 * an affinity reset after a failure), and relays messages between the two associations with
 * {@link relayAssociations}. Built on core's public surface only, as a third party would.
 */
import { isIP } from 'node:net';
import {
  type Addr,
  DEFAULT_PROXY_SOCKET_OPTIONS,
  type Logger,
  newProxySocket,
  type ProxySocket,
  type ProxySocketContext,
  type ProxySocketFactory,
  type ServiceInfo,
  SocketOpenError,
  servicePortNameString,
} from '@userspace-proxy/core';
import { channels, type RefusedMessage } from '@userspace-proxy/core/diagnostics';
import {
  isNoEndpointsError,
  joinHostPort,
  LogLimiter,
  splitHostPort,
} from '@userspace-proxy/core/sockets';
import type { SctpAssociation, SctpConnectOptions, SctpEngine, SctpListener } from './engine.js';
import { DEFAULT_ENCAPSULATION_PORT } from './engine.js';
import { createUserspaceSctpEngine, type UserspaceSctpEngineOptions } from './engine-userspace.js';
import type { SctpAssociationOptions } from './options.js';
import { relayAssociations } from './relay.js';

/** Options of the SCTP proxy socket. */
export interface SctpProxySocketOptions {
  /** The engine. Default: one userspace engine shared by every socket of the factory. */
  readonly engine?: SctpEngine;
  /** Local UDP port of the portal's encapsulation. Default 9899. */
  readonly encapsulationPort?: number;
  /** UDP encapsulation port of the endpoints (Kubernetes endpoints carry none). Default 9899. */
  readonly endpointEncapsulationPort?: number;
  /** Associations one socket relays at once (client side); more are aborted. Default 1024. */
  readonly maxAssociations?: number;
  /**
   * Client associations from one client IP address; more are aborted (Out of Resource). Default
   * `maxAssociations`: no separate bound, since clients behind one NAT or node share an address.
   */
  readonly maxAssociationsPerAddress?: number;
  /**
   * Each endpoint association on a UDP socket of its own, connected to the endpoint
   * ({@link SctpConnectOptions.connectedSocket}): a third less CPU per packet sent to endpoints,
   * for one file descriptor per relay. The endpoint must answer from the UDP port it is sent to.
   * Default true.
   */
  readonly connectedEndpointSockets?: boolean;
  /** One dial attempt per entry, each with that timeout, ms. Default core's [250, 500, 1000, 2000]. */
  readonly dialTimeoutsMs?: readonly number[];
  /**
   * Parameters of both associations of a relay. They bound what one relay buffers: per direction
   * at most `sendHighWaterMark` queued plus `receiveWindow + maxMessageBytes` held. Default
   * {@link SCTP_PROXY_ASSOCIATION_DEFAULTS}: 1 MiB window and high-water mark, 256 KiB messages,
   * and an RTO starting at 200 ms so a lost INIT fits the first dial attempt.
   */
  readonly association?: SctpAssociationOptions;
  /**
   * The datagram I/O of the engine the socket (or the factory) makes when none is given
   * ({@link UserspaceSctpEngineOptions.udpIo}): `'node'` (node:dgram, the default) or `'helper'`
   * (a C helper moving datagrams in batches and doing the CRC32c). Ignored with `engine`.
   */
  readonly udpIo?: 'node' | 'helper';
}

/**
 * The relay's association defaults. Window and high-water mark are the engine's own 1 MiB: a relay
 * is a pipeline whose three processes share the cores, and a 256 KiB window ran dry whenever one was
 * descheduled (64 KiB messages: 8.8–9.8 ms of proxy CPU per MB against 7.7–8.8; docs/sctp.md "Sixth
 * pass"). A full 1 MiB window (~730 datagrams) fits the 4 MiB UDP receive buffer asked for.
 */
export const SCTP_PROXY_ASSOCIATION_DEFAULTS: Readonly<SctpAssociationOptions> = {
  receiveWindow: 1 << 20,
  sendHighWaterMark: 1 << 20,
  maxMessageBytes: 256 * 1024,
  rtoInitial: 200,
  rtoMin: 200,
};

/** Counters of one SCTP proxy socket. */
export interface SctpProxySocketCounters {
  accepted: number;
  relayed: number;
  refused: Record<string, number>;
  dialFailures: number;
}

/** See the module comment. Made by {@link withSctp} / {@link createSctpProxySocketFactory}. */
export class SctpProxySocket implements ProxySocket {
  readonly counters: SctpProxySocketCounters = {
    accepted: 0,
    relayed: 0,
    refused: {},
    dialFailures: 0,
  };
  private readonly log: Logger;
  private readonly name: string;
  private readonly relays = new Set<SctpAssociation>();
  private readonly dials = new Set<AbortController>();
  private serving: ServiceInfo | undefined;
  private closed: Promise<void> | undefined;
  private stopServing: (() => void) | undefined;
  private idleWaiters: Array<() => void> = [];

  private constructor(
    private readonly ctx: ProxySocketContext,
    private readonly listener: SctpListener,
    private readonly engine: SctpEngine,
    private readonly opts: Required<
      Omit<SctpProxySocketOptions, 'engine' | 'association' | 'udpIo'>
    > & {
      association: SctpAssociationOptions;
    },
  ) {
    this.log = ctx.logger;
    this.name = servicePortNameString(ctx.servicePort);
  }

  /** Binds the portal; rejects with core's SocketOpenError. */
  static async open(
    ctx: ProxySocketContext,
    options: SctpProxySocketOptions = {},
    engine?: SctpEngine,
  ): Promise<SctpProxySocket> {
    const e = options.engine ?? engine ?? ownEngine(ctx, options);
    const opts = {
      encapsulationPort: options.encapsulationPort ?? DEFAULT_ENCAPSULATION_PORT,
      endpointEncapsulationPort: options.endpointEncapsulationPort ?? DEFAULT_ENCAPSULATION_PORT,
      maxAssociations: options.maxAssociations ?? 1024,
      maxAssociationsPerAddress:
        options.maxAssociationsPerAddress ?? options.maxAssociations ?? 1024,
      connectedEndpointSockets: options.connectedEndpointSockets ?? true,
      dialTimeoutsMs: options.dialTimeoutsMs ?? DEFAULT_PROXY_SOCKET_OPTIONS.dialTimeoutsMs,
      association: { ...SCTP_PROXY_ASSOCIATION_DEFAULTS, ...options.association },
    };
    const address = ctx.ip ?? '0.0.0.0';
    let listener: SctpListener;
    try {
      listener = await e.listen({
        address,
        port: ctx.port,
        encapsulationPort: opts.encapsulationPort,
        maxAssociations: opts.maxAssociations,
        maxAssociationsPerAddress: opts.maxAssociationsPerAddress,
        association: opts.association,
      });
    } catch (cause) {
      throw new SocketOpenError(`${address}:${ctx.port}/SCTP`, { cause });
    }
    return new SctpProxySocket(ctx, listener, e, opts);
  }

  addr(): Addr {
    return { address: this.listener.address, port: this.listener.port };
  }

  listenPort(): number {
    return this.ctx.port;
  }

  activeConnections(): number {
    return this.relays.size;
  }

  idle(): Promise<void> {
    if (this.relays.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * ProxySocket: ABORTs every association this socket relays, and its dials. `Proxier.drain` calls
   * it at its deadline, so a client learns that its association was cut, as a TCP client gets an
   * RST, rather than keeping it until heartbeats fail; the relay carries each ABORT to the
   * endpoint's side.
   */
  abortConnections(): void {
    for (const d of this.dials) d.abort(new Error('the proxy is shutting down'));
    for (const client of [...this.relays]) client.abort('the proxy is shutting down');
  }

  proxyLoop(info: ServiceInfo): Promise<void> {
    if (this.closed) return this.closed;
    this.serving = info;
    this.listener.on('association', this.onAssociation);
    this.log.debug(
      `proxying ${this.name} on ${this.listener.address}:${this.listener.port}/SCTP (UDP ${this.listener.encapsulationPort})`,
    );
    return new Promise((resolve) => {
      this.stopServing = resolve;
      this.ctx.signal.addEventListener('abort', () => void this.close(), { once: true });
    });
  }

  close(): Promise<void> {
    if (this.closed) return this.closed;
    this.listener.off('association', this.onAssociation);
    for (const d of this.dials) d.abort(new Error('proxy socket closed'));
    this.closed = this.listener.close().then(() => this.stopServing?.());
    return this.closed;
  }

  private refuse(client: SctpAssociation, reason: string, detail: string): void {
    this.counters.refused[reason] = (this.counters.refused[reason] ?? 0) + 1;
    if (channels.refused.hasSubscribers) {
      const published: RefusedMessage['reason'] =
        reason === 'no-endpoints' || reason === 'dial-failed'
          ? reason
          : reason === 'association-limit'
            ? 'connection-limit'
            : 'other';
      channels.refused.publish({ service: this.name, protocol: 'SCTP', reason: published, detail });
    }
    this.log.debug(
      `${this.name}: refusing SCTP association from ${client.remoteAddress}:${client.remotePort}: ${detail}`,
    );
    client.abort(detail);
  }

  private readonly onAssociation = (client: SctpAssociation): void => {
    this.counters.accepted++;
    const info = this.serving;
    if (info === undefined || this.closed !== undefined) {
      this.refuse(client, 'closed', 'proxy socket closed');
      return;
    }
    if (!info.isAlive()) {
      this.refuse(client, 'closed', 'Service port no longer served');
      void this.close();
      return;
    }
    if (this.relays.size >= this.opts.maxAssociations) {
      this.refuse(client, 'association-limit', `${this.opts.maxAssociations} associations open`);
      return;
    }
    client.pause(); // what arrives before the endpoint is up waits (its window closes)
    this.track(client);
    const started = performance.now();
    void this.dial(client).then(
      (dialed) => {
        if (dialed === undefined) return;
        const { association: endpoint, endpoint: target } = dialed;
        if (client.closeInfo) {
          endpoint.abort('client went away during the dial');
          return;
        }
        this.counters.relayed++;
        const relay = relayAssociations(client, endpoint);
        client.resume();
        if (channels.connectionOpen.hasSubscribers) {
          const from = joinHostPort(client.remoteAddress, client.remotePort);
          channels.connectionOpen.publish({
            service: this.name,
            protocol: 'SCTP',
            client: from,
            endpoint: target,
          });
        }
        void relay.done.then(() => {
          if (!channels.connectionClose.hasSubscribers) return;
          channels.connectionClose.publish({
            service: this.name,
            protocol: 'SCTP',
            endpoint: target,
            bytesIn: relay.counters.bytesToEndpoint,
            bytesOut: relay.counters.bytesToClient,
            durationMs: performance.now() - started,
          });
        });
      },
      (err: unknown) => this.refuse(client, 'internal-error', String(err)),
    );
  };

  private track(client: SctpAssociation): void {
    this.relays.add(client);
    client.once('close', () => {
      this.relays.delete(client);
      if (this.relays.size === 0 && this.idleWaiters.length > 0) {
        for (const w of this.idleWaiters.splice(0)) w();
      }
    });
  }

  /** Dials like the TCP socket: one endpoint per timeout, affinity reset after a failure. */
  private async dial(
    client: SctpAssociation,
  ): Promise<{ association: SctpAssociation; endpoint: string } | undefined> {
    const src = { address: client.remoteAddress, port: client.remotePort };
    let lastError: unknown;
    for (let i = 0; i < this.opts.dialTimeoutsMs.length; i++) {
      if (client.closeInfo || this.closed) return undefined;
      let endpoint: string;
      try {
        endpoint = this.ctx.loadBalancer.nextEndpoint(this.ctx.servicePort, src, i > 0);
      } catch (err) {
        this.refuse(client, isNoEndpointsError(err) ? 'no-endpoints' : 'dial-failed', String(err));
        return undefined;
      }
      const target = splitHostPort(endpoint);
      if (target === undefined || isIP(target.host) === 0 || target.port === 0) {
        lastError = new Error(`invalid endpoint "${endpoint}"`);
        continue;
      }
      const ac = new AbortController();
      const timeoutMs = this.opts.dialTimeoutsMs[i] as number;
      const timer = setTimeout(
        () => ac.abort(new Error(`SCTP connect to ${endpoint} timed out after ${timeoutMs} ms`)),
        timeoutMs,
      );
      const onClientClose = (): void => ac.abort(new Error('client went away'));
      client.once('close', onClientClose);
      this.dials.add(ac);
      try {
        const association = await this.engine.connect({
          address: target.host,
          port: target.port,
          encapsulationPort: this.opts.endpointEncapsulationPort,
          connectedSocket: this.opts.connectedEndpointSockets,
          signal: ac.signal,
          association: this.opts.association,
        });
        return { association, endpoint };
      } catch (err) {
        lastError = err;
        this.counters.dialFailures++;
        if (channels.dialError.hasSubscribers) {
          const error = err instanceof Error ? err : new Error(String(err));
          channels.dialError.publish({ service: this.name, protocol: 'SCTP', endpoint, error });
        }
        this.log.debug(`${this.name}: SCTP dial to ${endpoint} failed: ${String(err)}`);
      } finally {
        clearTimeout(timer);
        client.off('close', onClientClose);
        this.dials.delete(ac);
      }
    }
    if (!client.closeInfo)
      this.refuse(client, 'dial-failed', `no endpoint reachable: ${String(lastError)}`);
    return undefined;
  }
}

/** Options of {@link withSctp}. */
export type WithSctpOptions = Omit<SctpProxySocketOptions, 'engine'> & {
  readonly engine?: SctpEngine;
};

/**
 * A factory that serves SCTP with {@link SctpProxySocket} and hands every other protocol to `base`
 * (typically core's default factory). Its sockets share one engine, so every SCTP portal on one
 * address shares one UDP socket.
 */
export function withSctp(
  base: ProxySocketFactory,
  options: WithSctpOptions = {},
): ProxySocketFactory {
  let engine = options.engine;
  return (ctx) => {
    if (ctx.protocol !== 'SCTP') return base(ctx);
    engine ??= ownEngine(ctx, options);
    return SctpProxySocket.open(ctx, options, engine);
  };
}

/** The engine a socket or factory makes for itself: warnings to the context's logger. */
function ownEngine(ctx: ProxySocketContext, options: SctpProxySocketOptions): SctpEngine {
  return createUserspaceSctpEngine({
    onWarning: limitedWarnings(ctx.logger),
    ...(options.udpIo !== undefined ? { udpIo: options.udpIo } : {}),
  });
}

/**
 * An engine's `onWarning` that logs at warn level at most one line a second. The warnings
 * (contained exceptions, refused associations, socket errors) are each already short and escaped,
 * but a hostile peer can cause one per packet; the count held back goes with the next line. The
 * proxy socket uses it for the engines it makes; pass it to an engine you make yourself
 * (`createRawSctpEngine({ onWarning: limitedWarnings(logger) })`).
 */
export function limitedWarnings(log: Logger): (message: string) => void {
  const limiter = new LogLimiter(1000);
  return (message) => {
    const suppressed = limiter.take();
    if (suppressed < 0) return;
    log.warn(suppressed > 0 ? `${message} (${suppressed} more SCTP warnings suppressed)` : message);
  };
}

/** {@link withSctp} over core's default factory: TCP and UDP as core serves them, SCTP here. */
export function createSctpProxySocketFactory(options: WithSctpOptions = {}): ProxySocketFactory {
  return withSctp(newProxySocket, options);
}
