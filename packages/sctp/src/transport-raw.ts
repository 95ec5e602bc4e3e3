/**
 * Raw IP transport (native SCTP, IP protocol 132, IPv4), opt-in: for peers that do not speak RFC 6951
 * UDP encapsulation, on hosts without kernel SCTP. Each local address gets one raw socket in the
 * helper process (`transport-raw-helper.ts`), bound to it, so the kernel hands over only SCTP
 * packets addressed to that address; each socket is wrapped, exactly like a UDP socket, in an
 * {@link SctpEndpoint}, whose guard (CRC32c, chunk bounds) sees every packet before an association
 * does. The engine here is {@link UserspaceSctpEngine}'s listen/connect over that pool instead of
 * the UDP one; the associations and the proxy socket are the same code.
 */
import { isIPv4 } from 'node:net';
import type { Association } from './association.js';
import {
  type EndpointSettings,
  random32,
  SctpEndpoint,
  type SctpEndpointCounters,
} from './endpoint.js';
import type {
  SctpAssociation,
  SctpConnectOptions,
  SctpEngine,
  SctpListener,
  SctpListenOptions,
} from './engine.js';
import { EngineListener } from './engine-listener.js';
import type { UserspaceSctpEngineOptions } from './engine-userspace.js';
import { SctpConnectError, SctpError } from './errors.js';
import {
  type ResolvedAssociationOptions,
  resolveAssociationOptions,
  type SctpAssociationOptions,
} from './options.js';
import { defaultTimers } from './timers.js';
import {
  RawHelper,
  type RawHelperCounters,
  type RawHelperOptions,
} from './transport-raw-helper.js';

/** Raw mode speaks IPv4 only (an IPv6 raw socket hands back no IP header, and nothing here needs it). */
export class SctpRawIpv4OnlyError extends SctpError {
  constructor(address: string) {
    super('ERR_SCTP_RAW_IPV4_ONLY', `the raw SCTP transport is IPv4 only; ${address} is not`);
  }
}

/** Options of {@link createRawSctpEngine}. */
export interface RawSctpEngineOptions extends Omit<UserspaceSctpEngineOptions, 'udpBufferBytes'> {
  /** How the helper process is built and run (prebuilt path, compiler, namespace prefix). */
  readonly helper?: RawHelperOptions;
}

const WILDCARD = '0.0.0.0';

/**
 * The SCTP engine over raw IPv4. Nothing is opened until the first listen or connect; the helper
 * starts then (and again after it died). Listening on 0.0.0.0 takes every SCTP packet of the
 * namespace that no address-bound socket of this engine takes.
 */
export class RawSctpEngine implements SctpEngine {
  private readonly defaults: SctpAssociationOptions;
  private readonly settings: Omit<EndpointSettings, 'onIdle'>;
  private readonly endpoints = new Map<string, Promise<SctpEndpoint>>();
  private helper: Promise<RawHelper> | undefined;
  private readonly totals: RawHelperCounters = {
    packetsIn: 0,
    packetsOut: 0,
    sendErrors: 0,
    sendDropped: 0,
  };
  private current: RawHelper | undefined;

  constructor(private readonly options: RawSctpEngineOptions = {}) {
    this.defaults = options.association ?? {};
    resolveAssociationOptions(this.defaults);
    this.settings = {
      timers: options.timers ?? defaultTimers,
      ...(options.replyRate !== undefined ? { replyRate: options.replyRate } : {}),
      ...(options.onWarning ? { onWarning: options.onWarning } : {}),
    };
  }

  /** The helper's counters, summed over every helper this engine ran. */
  get counters(): Readonly<RawHelperCounters> {
    const c = this.current?.counters;
    if (c === undefined) return { ...this.totals };
    return {
      packetsIn: this.totals.packetsIn + c.packetsIn,
      packetsOut: this.totals.packetsOut + c.packetsOut,
      sendErrors: this.totals.sendErrors + c.sendErrors,
      sendDropped: this.totals.sendDropped + c.sendDropped,
    };
  }

  /** Each open endpoint's counters (the guard's refusals per reason, contained exceptions, ...). */
  async endpointCounters(): Promise<Array<{ address: string; counters: SctpEndpointCounters }>> {
    const out: Array<{ address: string; counters: SctpEndpointCounters }> = [];
    for (const [address, p] of this.endpoints) {
      const ep = await p.catch(() => undefined);
      if (ep !== undefined) out.push({ address, counters: ep.counters });
    }
    return out;
  }

  /** Starts the helper now (listen and connect do it anyway): reports a missing privilege early. */
  start(): Promise<void> {
    return this.getHelper().then(() => undefined);
  }

  private getHelper(): Promise<RawHelper> {
    if (this.helper === undefined) {
      const p = RawHelper.start(this.options.helper).then((h) => {
        this.current = h;
        h.onExit((why) => this.onHelperExit(p, h, why));
        return h;
      });
      this.helper = p;
      p.catch(() => {
        if (this.helper === p) this.helper = undefined;
      });
    }
    return this.helper;
  }

  private onHelperExit(p: Promise<RawHelper>, h: RawHelper, why: string): void {
    for (const k of Object.keys(this.totals) as (keyof RawHelperCounters)[])
      this.totals[k] += h.counters[k];
    if (this.current === h) this.current = undefined;
    if (this.helper !== p) return;
    this.helper = undefined;
    const eps = [...this.endpoints.values()];
    this.endpoints.clear();
    if (eps.length > 0) this.settings.onWarning?.(`SCTP raw-IP helper ${why}`);
    for (const ep of eps) ep.then((e) => e.close()).catch(() => undefined);
  }

  private acquire(address: string): Promise<SctpEndpoint> {
    let p = this.endpoints.get(address);
    if (p === undefined) {
      const opened = this.open(address);
      p = opened;
      this.endpoints.set(address, opened);
      opened.catch(() => {
        if (this.endpoints.get(address) === opened) this.endpoints.delete(address);
      });
    }
    return p.then((ep) => {
      ep.retain();
      return ep;
    });
  }

  private async open(address: string): Promise<SctpEndpoint> {
    const helper = await this.getHelper();
    let ep: SctpEndpoint | undefined;
    const handle = await helper.open(address, (packet, src) => ep?.receive(packet, src, 0));
    const self = this.endpoints.get(address);
    ep = new SctpEndpoint(
      {
        send: (msg, _port, dst, callback) => {
          handle.send(msg, dst);
          callback?.(null);
        },
        close: (callback) => {
          handle.close();
          callback?.();
        },
      },
      address,
      0,
      {
        ...this.settings,
        onIdle: () => {
          if (this.endpoints.get(address) === self) this.endpoints.delete(address);
        },
      },
    );
    return ep;
  }

  private resolve(o: SctpAssociationOptions | undefined): ResolvedAssociationOptions {
    return resolveAssociationOptions({ ...this.defaults, ...o });
  }

  /** `encapsulationPort` is ignored: raw SCTP has no UDP port. */
  async listen(o: SctpListenOptions): Promise<SctpListener> {
    if (!isIPv4(o.address)) throw new SctpRawIpv4OnlyError(o.address);
    const opts = this.resolve(o.association);
    const ep = await this.acquire(o.address);
    try {
      const port = o.port === 0 ? pickPort(ep) : o.port;
      if (!Number.isInteger(port) || port < 1 || port > 65535)
        throw new RangeError(`SCTP port ${port} is not within 1..65535`);
      const l = new EngineListener(
        ep,
        o.address,
        port,
        0,
        opts,
        o.maxAssociations ?? 1024,
        o.maxAssociationsPerAddress,
      );
      if (!ep.addPortListener(port, l)) {
        throw new SctpError(
          'ERR_SCTP_PORT_IN_USE',
          `SCTP port ${port} on ${o.address} (raw) already has a listener`,
        );
      }
      return l;
    } finally {
      ep.release();
    }
  }

  /**
   * Without `localAddress` the association goes out from this engine's 0.0.0.0 socket when it has
   * one, else from the address the kernel routes from (asked in the helper's namespace), so its
   * packets leave with the source address the peer will answer to. The encapsulation ports are
   * ignored.
   */
  async connect(o: SctpConnectOptions): Promise<SctpAssociation> {
    o.signal?.throwIfAborted();
    if (!isIPv4(o.address)) throw new SctpRawIpv4OnlyError(o.address);
    if (o.localAddress !== undefined && !isIPv4(o.localAddress))
      throw new SctpRawIpv4OnlyError(o.localAddress);
    const target = `${o.address}:${o.port}`;
    const opts = this.resolve(o.association);
    let localAddress = o.localAddress;
    if (localAddress === undefined) {
      localAddress = this.endpoints.has(WILDCARD)
        ? WILDCARD
        : await (await this.getHelper()).route(o.address);
    }
    const ep = await this.acquire(localAddress);
    let a: Association;
    try {
      o.signal?.throwIfAborted();
      a = ep.connect(opts, o.address, o.port, 0, o.localPort ?? pickPort(ep));
    } finally {
      ep.release();
    }
    return new Promise<SctpAssociation>((resolve, reject) => {
      const onAbort = (): void => a.abort('connect aborted');
      o.signal?.addEventListener('abort', onAbort, { once: true });
      const onClose = (info: { detail: string }): void => {
        o.signal?.removeEventListener('abort', onAbort);
        if (o.signal?.aborted) reject(o.signal.reason);
        else reject(new SctpConnectError(target, info.detail));
      };
      a.once('established', () => {
        o.signal?.removeEventListener('abort', onAbort);
        a.off('close', onClose);
        resolve(a);
      });
      a.once('close', onClose);
    });
  }

  /** Aborts every association, closes every socket and stops the helper. */
  async close(): Promise<void> {
    const eps = [...this.endpoints.values()];
    this.endpoints.clear();
    await Promise.all(eps.map((p) => p.then((ep) => ep.close()).catch(() => undefined)));
    const h = this.helper;
    this.helper = undefined;
    if (h !== undefined) (await h.catch(() => undefined))?.close();
  }
}

/** Makes the raw-IP engine (see {@link RawSctpEngine}); opens nothing until used. */
export function createRawSctpEngine(options: RawSctpEngineOptions = {}): RawSctpEngine {
  return new RawSctpEngine(options);
}

function pickPort(ep: SctpEndpoint): number {
  for (let i = 0; i < 64; i++) {
    const port = 49152 + (random32() % 16384);
    if (!ep.portInUse(port)) return port;
  }
  throw new SctpError('ERR_SCTP_NO_PORT', 'no free SCTP port found in 49152..65535');
}
