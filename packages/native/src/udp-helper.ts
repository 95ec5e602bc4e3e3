/**
 * The UDP helper process and its frames (documented in native/udp-relay-helper.c and
 * docs/native.md): every command on stdin, every event on stdout, length-prefixed. The frames of
 * one tick go out in one write. This file knows the bytes; udp-engine.ts what they mean.
 */
import type { ChildProcess } from 'node:child_process';
import { HelperChild, newFrame, type Picks, picksFrame, spawnHelper } from './helper-process.js';
import { readId, writeId } from './relay-protocol.js';
import {
  buildUdpRelayHelper,
  UDP_CLOSE_REASONS,
  type UdpHelperEvents,
  type UdpHelperOptions,
  type UdpListenSpec,
} from './udp-protocol.js';

/** One running UDP helper process; made by {@link UdpHelper.start}. */
export class UdpHelper extends HelperChild {
  readonly #events: UdpHelperEvents;
  #out: Buffer[] = [];
  #scheduled = false;

  private constructor(child: ChildProcess, events: UdpHelperEvents, threads: number) {
    super(child, threads, (why) => events.exited(why));
    this.#events = events;
  }

  /** Builds (when needed) and starts a helper; resolves once it said hello. */
  static async start(o: UdpHelperOptions, events: UdpHelperEvents): Promise<UdpHelper> {
    const { child, path, threads } = await spawnHelper(o, buildUdpRelayHelper, () => 0);
    const h = new UdpHelper(child, events, threads);
    await h.hello(path, o.startTimeoutMs ?? 10_000, 'UDP');
    return h;
  }

  /** 'L': binds on every thread; resolves with 0 and the bound port, or an errno (-1: exited). */
  listen(listener: number, spec: UdpListenSpec): Promise<{ errno: number; port: number }> {
    if (this.isExited) return Promise.resolve({ errno: -1, port: 0 });
    return this.replies.listen(listener, () => {
      const a = Buffer.from(spec.address, 'latin1');
      const f = newFrame(0x4c, 27 + a.length);
      f.writeUInt32BE(listener, 5);
      f.writeUInt16BE(spec.port, 9);
      f.writeUInt32BE(Math.min(spec.idleMs, 0x7fffffff) >>> 0, 11);
      f.writeUInt32BE(Math.min(spec.maxSessions, 0xffffffff) >>> 0, 15);
      f.writeUInt32BE(Math.min(spec.maxPerSource, 0xffffffff) >>> 0, 19);
      f.writeUInt32BE(Math.min(spec.receiveBufferBytes, 0x7fffffff) >>> 0, 23);
      f.writeUInt32BE(Math.min(spec.sessionBufferBytes, 0x7fffffff) >>> 0, 27);
      f[31] = a.length;
      a.copy(f, 32);
      this.#push(f);
    });
  }

  /** 'I': the listener's idle timeout from now on (the ServiceInfo's, known at proxyLoop). */
  setIdle(listener: number, idleMs: number): void {
    const f = newFrame(0x49, 8);
    f.writeUInt32BE(listener, 5);
    f.writeUInt32BE(Math.min(Math.max(1, Math.ceil(idleMs)), 0x7fffffff) >>> 0, 9);
    this.#push(f);
  }

  /** 'X': closes a listener on every thread (its sessions end); resolves once it is closed. */
  closeListener(listener: number): Promise<void> {
    if (this.isExited) return Promise.resolve();
    return this.replies.close(listener, () => {
      const f = newFrame(0x58, 4);
      f.writeUInt32BE(listener, 5);
      this.#push(f);
    });
  }

  /** 'P': endpoints picked ahead for thread `thread`'s new sessions on `listener`. */
  picks(listener: number, thread: number, epoch: number, picks: Picks): void {
    const f = picksFrame(listener, thread, epoch, 0, picks);
    this.#push(f);
  }

  /** 'V': Node's verdict on an asked session: relay to `target`, or drop it (undefined). */
  verdict(session: number, target: { host: string; port: number } | undefined): void {
    const a = Buffer.from(target?.host ?? '', 'latin1');
    const f = newFrame(0x56, 12 + a.length);
    writeId(f, 5, session);
    f[13] = target === undefined ? 0 : 1;
    f.writeUInt16BE(target?.port ?? 0, 14);
    f[16] = a.length;
    a.copy(f, 17);
    this.#push(f);
  }

  /** 'C': ends a session; its 'c' follows with `reason`. */
  close(session: number, reason: 'closed' | 'endpoint-removed'): void {
    const f = newFrame(0x43, 9);
    writeId(f, 5, session);
    f[13] = UDP_CLOSE_REASONS.indexOf(reason);
    this.#push(f);
  }

  #push(frame: Buffer): void {
    if (this.isExited) return;
    this.#out.push(frame);
    if (!this.#scheduled) {
      this.#scheduled = true;
      process.nextTick(() => this.flush());
    }
  }

  protected flush(): void {
    this.#scheduled = false;
    const out = this.#out;
    if (out.length === 0) return;
    this.#out = [];
    const stdin = this.child.stdin;
    if (this.isExited || stdin == null || stdin.destroyed) return;
    stdin.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
  }

  protected onFrame(b: Buffer, off: number, len: number): void {
    const e = this.#events;
    switch (b[off]) {
      case 0x6e: // 'n' asked: u64 session, u32 listener, u16 port, u8 alen, addr
        if (len >= 16) {
          const n = Math.min(b[off + 15] as number, len - 16);
          e.asked(
            readId(b, off + 1),
            b.readUInt32BE(off + 9),
            b.toString('latin1', off + 16, off + 16 + n),
            b.readUInt16BE(off + 13),
          );
        }
        return;
      case 0x6f: // 'o' opened with a pick
        if (len >= 20) {
          const n = Math.min(b[off + 19] as number, len - 20);
          const p = off + 20 + n;
          if (len < 20 + n + 3) return;
          const en = Math.min(b[p + 2] as number, len - 20 - n - 3);
          e.opened(
            readId(b, off + 1),
            b.readUInt32BE(off + 9),
            b.readUInt32BE(off + 13),
            b.toString('latin1', off + 20, p),
            b.readUInt16BE(off + 17),
            joinEndpoint(b.toString('latin1', p + 3, p + 3 + en), b.readUInt16BE(p)),
          );
        }
        return;
      case 0x63: // 'c' closed
        if (len >= 50) {
          const u64 = (at: number) => readId(b, off + at);
          e.closed(
            u64(1),
            {
              datagramsIn: u64(9),
              bytesIn: u64(17),
              datagramsOut: u64(25),
              bytesOut: u64(33),
              dropped: b.readUInt32BE(off + 41),
            },
            UDP_CLOSE_REASONS[b[off + 45] as number] ?? 'error',
            b.readInt32BE(off + 46),
          );
        }
        return;
      case 0x64: // 'd' dropped
        if (len >= 13)
          e.dropped(b.readUInt32BE(off + 1), b.readUInt32BE(off + 5), b.readUInt32BE(off + 9));
        return;
      case 0x70: // 'p' picks taken
        if (len >= 10)
          e.picksTaken(b.readUInt32BE(off + 1), b[off + 5] as number, b.readUInt32BE(off + 6));
        return;
      default:
        this.commonFrame(b, off, len);
        return;
    }
  }
}

/** "ip:port", bracketed for IPv6, as core's joinHostPort writes endpoints. */
function joinEndpoint(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}
