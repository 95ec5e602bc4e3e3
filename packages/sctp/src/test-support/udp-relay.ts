/**
 * A fault-injecting UDP relay in the test process, between an SCTP client and server speaking
 * RFC 6951: each datagram passes a policy that may drop, duplicate, delay (reorder) or corrupt it.
 */
import { createSocket, type Socket } from 'node:dgram';

/** Direction of a datagram through the relay. */
export type Direction = 'c2s' | 's2c';

/** What to do with one datagram (default: pass it on unchanged). */
export interface RelayDecision {
  readonly drop?: boolean;
  readonly duplicate?: boolean;
  readonly delayMs?: number;
  readonly corrupt?: boolean;
  /** With `corrupt`: the byte to flip (negative counts from the end); default a random one past the header. */
  readonly corruptAt?: number;
}

/** Decides per datagram; `chunkTypes` are read loosely from the packet. */
export type RelayPolicy = (
  dir: Direction,
  chunkTypes: readonly number[],
  packet: Buffer,
) => RelayDecision | undefined;

/** A running relay: clients send to `address`:`port`. */
export interface Relay {
  readonly address: string;
  readonly port: number;
  readonly stats: {
    forwarded: number;
    dropped: number;
    duplicated: number;
    delayed: number;
    corrupted: number;
  };
  /** The verification tag last seen each way (c2s carries the server's tag, s2c the client's). */
  readonly tags: { c2s: number | undefined; s2c: number | undefined };
  /** Sends a crafted datagram as if the relay had forwarded it: to the server (c2s) or the client (s2c). */
  inject(dir: Direction, packet: Buffer): void;
  close(): Promise<void>;
}

/** Chunk types of a packet, without checking anything. */
export function chunkTypes(p: Buffer): number[] {
  const out: number[] = [];
  let off = 12;
  while (off + 4 <= p.length && out.length < 64) {
    out.push(p[off] as number);
    const len = p.readUInt16BE(off + 2);
    if (len < 4) break;
    off += (len + 3) & ~3;
  }
  return out;
}

function bind(address: string): Promise<Socket> {
  const s = createSocket('udp4');
  return new Promise((resolve, reject) => {
    s.once('error', reject);
    s.bind(0, address, () => resolve(s));
  });
}

/** Starts a relay on `address` forwarding to the server at serverAddress:serverPort. */
export async function startRelay(
  address: string,
  serverAddress: string,
  serverPort: number,
  policy: RelayPolicy,
): Promise<Relay> {
  const front = await bind(address);
  const back = await bind(address);
  const stats = { forwarded: 0, dropped: 0, duplicated: 0, delayed: 0, corrupted: 0 };
  let client: { address: string; port: number } | undefined;
  const timers = new Set<ReturnType<typeof setTimeout>>();
  let closed = false;
  const tags: { c2s: number | undefined; s2c: number | undefined } = {
    c2s: undefined,
    s2c: undefined,
  };
  const pass = (dir: Direction, msg: Buffer, out: Socket, port: number, to: string): void => {
    if (msg.length >= 12) tags[dir] = msg.readUInt32BE(4);
    const d = policy(dir, chunkTypes(msg), msg) ?? {};
    if (d.drop) {
      stats.dropped++;
      return;
    }
    let data = msg;
    if (d.corrupt && msg.length > 12) {
      data = Buffer.from(msg);
      const at =
        d.corruptAt === undefined
          ? 12 + Math.floor(Math.random() * (data.length - 12))
          : (d.corruptAt + data.length) % data.length;
      data[at] = (data[at] as number) ^ 0x5a;
      stats.corrupted++;
    }
    const send = (): void => {
      if (closed) return;
      stats.forwarded++;
      out.send(data, port, to);
    };
    if (d.delayMs && d.delayMs > 0) {
      stats.delayed++;
      const t = setTimeout(() => {
        timers.delete(t);
        send();
      }, d.delayMs);
      timers.add(t);
    } else {
      send();
    }
    if (d.duplicate) {
      stats.duplicated++;
      send();
    }
  };
  front.on('message', (msg, rinfo) => {
    client = { address: rinfo.address, port: rinfo.port };
    pass('c2s', msg, back, serverPort, serverAddress);
  });
  back.on('message', (msg) => {
    if (client) pass('s2c', msg, front, client.port, client.address);
  });
  return {
    address,
    port: front.address().port,
    stats,
    tags,
    inject: (dir, packet) => {
      if (closed) return;
      if (dir === 'c2s') back.send(packet, serverPort, serverAddress);
      else if (client) front.send(packet, client.port, client.address);
    },
    close: async () => {
      closed = true;
      for (const t of timers) clearTimeout(t);
      await Promise.all([
        new Promise<void>((r) => front.close(() => r())),
        new Promise<void>((r) => back.close(() => r())),
      ]);
    },
  };
}
