import type dgram from 'node:dgram';
import {
  type LoadBalancer,
  type Logger,
  type ProxySocketContext,
  type Service,
  type ServicePortName,
  servicePortNameString,
} from '@userspace-proxy/core';
import { type IdlerUdpMessage, idlerChannels } from './diagnostics.js';
import type { HoldQueueOwner } from './hold-queue.js';

/** A socket whose datagrams a gate can hold back and deliver later. */
export interface GatedDatagramSocket {
  /** Delivers a datagram to the proxy as if it had just arrived from `rinfo`. */
  deliver(datagram: Buffer, rinfo: dgram.RemoteInfo): void;
}

interface Buffered {
  socket: GatedDatagramSocket;
  datagram: Buffer;
  rinfo: dgram.RemoteInfo;
  at: number;
}

/**
 * What a UDP Service port does while it has no endpoints: datagrams are dropped (or, opt-in, kept in
 * a small buffer and replayed in order with their client's address once endpoints come), and
 * NeedPods is asked for once per burst: again only when a datagram comes `udpBurstGapMs` after the
 * previous one (OpenShift's rule; a steady stream asks once). Shared by every listener of the port.
 */
export class UdpGate {
  readonly key: string;
  readonly servicePort: ServicePortName;
  readonly #owner: Pick<HoldQueueOwner, 'options' | 'now' | 'counters' | 'needPods'>;
  readonly #forget: () => void;
  readonly #contexts = new Map<ProxySocketContext, () => void>();
  readonly #buffer: Buffered[] = [];
  #bufferBytes = 0;
  #service: Service;
  #lb: LoadBalancer;
  #log: Logger;
  #lastDatagramAt = Number.NEGATIVE_INFINITY;
  #burst: AbortController | undefined;

  constructor(
    owner: Pick<HoldQueueOwner, 'options' | 'now' | 'counters' | 'needPods'>,
    key: string,
    context: ProxySocketContext,
    forget: () => void,
  ) {
    this.#owner = owner;
    this.key = key;
    this.servicePort = context.servicePort;
    this.#service = context.service;
    this.#lb = context.loadBalancer;
    this.#log = context.logger;
    this.#forget = forget;
  }

  /** "ns/name:port". */
  get name(): string {
    return servicePortNameString(this.servicePort);
  }

  /** A listener of the port opened. */
  attach(context: ProxySocketContext): void {
    this.#service = context.service;
    this.#lb = context.loadBalancer;
    this.#log = context.logger;
    const off = context.onEndpointsChanged(({ hasEndpoints }) => {
      if (hasEndpoints) this.#opened();
    });
    this.#contexts.set(context, off);
  }

  /** A listener of the port closed; its buffered datagrams go (counted as dropped). */
  detach(context: ProxySocketContext, socket: GatedDatagramSocket): void {
    this.#contexts.get(context)?.();
    this.#contexts.delete(context);
    let dropped = 0;
    for (let i = this.#buffer.length - 1; i >= 0; i--) {
      const entry = this.#buffer[i];
      if (entry?.socket === socket) {
        this.#buffer.splice(i, 1);
        this.#bufferBytes -= entry.datagram.length;
        dropped++;
      }
    }
    this.#dropped(dropped);
    if (this.#contexts.size === 0) {
      this.#burst?.abort();
      this.#forget();
    }
  }

  /** True: deliver the datagram now (the port has endpoints); false: the gate took it. */
  admit(socket: GatedDatagramSocket, datagram: Buffer, rinfo: dgram.RemoteInfo): boolean {
    if (this.#lb.serviceHasEndpoints(this.servicePort)) return true;
    const { options, counters } = this.#owner;
    const now = this.#owner.now();
    const newBurst = now - this.#lastDatagramAt >= options.udpBurstGapMs;
    this.#lastDatagramAt = now;
    if (newBurst) {
      this.#burst?.abort();
      this.#burst = new AbortController();
      this.#log.info(`${this.name} has no endpoints: dropping its datagrams and asking for pods`);
      this.#owner.needPods.send(this.#service, this.servicePort, 'UDP', false, this.#burst.signal);
    }
    if (
      this.#buffer.length < options.udpBufferDatagrams &&
      this.#bufferBytes + datagram.length <= options.udpBufferBytes
    ) {
      this.#buffer.push({ socket, datagram, rinfo, at: now });
      this.#bufferBytes += datagram.length;
      counters.udpBuffered++;
      return false;
    }
    this.#dropped(1);
    return false;
  }

  /**
   * Drops the buffered datagrams, counted: the hybrid is about to move the Service to the main
   * proxier, and the idling socket that would replay them closes with the switch (its sessions,
   * and anything replayed through them, with it).
   */
  discard(): void {
    const n = this.#buffer.length;
    this.#buffer.length = 0;
    this.#bufferBytes = 0;
    this.#dropped(n);
  }

  #dropped(datagrams: number): void {
    if (datagrams === 0) return;
    this.#owner.counters.udpDropped += datagrams;
    if (idlerChannels.udpDropped.hasSubscribers) {
      const message: IdlerUdpMessage = { service: this.name, protocol: 'UDP', datagrams };
      idlerChannels.udpDropped.publish(message);
    }
  }

  /** Drops the buffer (counted) and ends the burst (the Idler closes). */
  close(): void {
    for (const off of this.#contexts.values()) off();
    this.#contexts.clear();
    this.discard();
    this.#burst?.abort();
  }

  /** Endpoints came: the burst's request is moot, and what was buffered (and is fresh) is replayed. */
  #opened(): void {
    this.#burst?.abort();
    this.#burst = undefined;
    // A new burst after the port lost its endpoints again asks at once.
    this.#lastDatagramAt = Number.NEGATIVE_INFINITY;
    if (this.#buffer.length === 0) return;
    const entries = this.#buffer.splice(0);
    this.#bufferBytes = 0;
    const oldest = this.#owner.now() - this.#owner.options.holdTimeoutMs;
    let replayed = 0;
    for (const entry of entries) {
      if (entry.at < oldest) continue;
      replayed++;
      entry.socket.deliver(entry.datagram, entry.rinfo);
    }
    // Stale ones (held longer than a TCP client would be) are dropped, and counted as such.
    this.#dropped(entries.length - replayed);
    this.#owner.counters.udpReplayed += replayed;
    this.#log.info(`${this.name} has endpoints: replayed ${replayed} buffered datagram(s)`);
    if (idlerChannels.udpReplayed.hasSubscribers && replayed > 0) {
      const message: IdlerUdpMessage = { service: this.name, protocol: 'UDP', datagrams: replayed };
      idlerChannels.udpReplayed.publish(message);
    }
  }
}
