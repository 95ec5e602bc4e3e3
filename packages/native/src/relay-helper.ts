/**
 * The helper process and its frame protocol (documented in native/tcp-relay-helper.c and
 * docs/native.md): length-prefixed frames, listener commands on stdin, each connection's commands
 * on the pipe of its helper thread (descriptor 3 + thread), events on stdout. The frames of one
 * event-loop turn go out in one write per pipe (setImmediate, not nextTick: the chunks one poll
 * phase reads each ran their own nextTick flush, so a hand-over wrote once per chunk of 'd'
 * frames); the helper's frames of one event-loop turn come in one chunk. This file knows the bytes;
 * what they mean for sockets and connections is engine.ts's.
 */
import type { ChildProcess } from 'node:child_process';
import type { Writable } from 'node:stream';
import { HelperChild, newFrame, type Picks, picksFrame, spawnHelper } from './helper-process.js';
import {
  buildRelayHelper,
  CLOSE_HOW,
  type CloseMode,
  PICK_RING,
  type RelayHelperEvents,
  type RelayHelperOptions,
  type RelayLimits,
  readId,
  threadPipe,
  writeId,
} from './relay-protocol.js';

/** One running helper process; made by {@link RelayHelper.start}. */
export class RelayHelper extends HelperChild {
  #events: RelayHelperEvents;
  /** Where frames go: [0] is stdin, [1 + i] thread i's command pipe. */
  readonly #pipes: (Writable | null)[];
  /** The frames of this tick, per pipe. */
  readonly #out: Buffer[][];
  #scheduled = false;
  /** Each endpoint host's bytes in a 'D' frame, made once per host (see hostBytes). */
  readonly #hosts = new Map<string, Buffer>();

  private constructor(child: ChildProcess, events: RelayHelperEvents, threads: number) {
    super(child, threads, (why) => events.exited(why));
    this.#events = events;
    this.#pipes = [child.stdin, ...child.stdio.slice(3, 3 + threads)] as (Writable | null)[];
    this.#out = this.#pipes.map(() => []);
    // A dying helper can fail a pending write: 'exit' reports it; never an unhandled 'error'.
    for (const pipe of this.#pipes) pipe?.on('error', () => undefined);
  }

  /** Builds (when needed) and starts a helper; resolves once it said hello. */
  static async start(o: RelayHelperOptions, events: RelayHelperEvents): Promise<RelayHelper> {
    // One command pipe per thread, descriptors 3 and up.
    const { child, path, threads } = await spawnHelper(o, buildRelayHelper, (n) => n);
    const h = new RelayHelper(child, events, threads);
    await h.hello(path, o.startTimeoutMs ?? 10_000, 'TCP');
    return h;
  }

  /** 'S': the limits every thread enforces from now on. */
  setLimits(l: RelayLimits): void {
    const f = newFrame(0x53, 16);
    f.writeUInt32BE(l.maxConnections >>> 0, 5);
    f.writeUInt32BE(Math.min(l.keepAliveMs, 0x7fffffff) >>> 0, 9);
    f.writeUInt32BE(Math.min(l.idleTimeoutMs, 0x7fffffff) >>> 0, 13);
    f.writeUInt32BE(Math.min(l.halfCloseTimeoutMs, 0x7fffffff) >>> 0, 17);
    this.#push(0, f);
  }

  /** 'L': listens on every thread; resolves with 0 and the bound port, or an errno (-1: exited). */
  listen(
    listener: number,
    address: string,
    port: number,
    backlog: number,
  ): Promise<{ errno: number; port: number }> {
    if (this.isExited) return Promise.resolve({ errno: -1, port: 0 });
    return this.replies.listen(listener, () => {
      const a = Buffer.from(address, 'latin1');
      const f = newFrame(0x4c, 11 + a.length);
      f.writeUInt32BE(listener, 5);
      f.writeUInt16BE(port, 9);
      f.writeUInt32BE(backlog, 11);
      f[15] = a.length;
      a.copy(f, 16);
      this.#push(0, f);
    });
  }

  /**
   * 'X': closes a listener on every thread (its connections carry on); resolves once every
   * thread's socket is closed ('x'), so a client that connects afterwards is refused.
   */
  closeListener(listener: number): Promise<void> {
    if (this.isExited) return Promise.resolve();
    return this.replies.close(listener, () => {
      const f = newFrame(0x58, 4);
      f.writeUInt32BE(listener, 5);
      this.#push(0, f);
    });
  }

  /**
   * 'P': endpoints picked ahead for thread `thread`'s accepts on `listener`, dialled there at once
   * with `timeoutMs`; a new `epoch` replaces the thread's ring, the same one appends to it.
   * At most {@link PICK_RING} picks, hosts as IP text.
   */
  picks(listener: number, thread: number, epoch: number, timeoutMs: number, picks: Picks): void {
    const f = picksFrame(listener, thread, epoch, 4, picks);
    f.writeUInt32BE(Math.min(Math.ceil(timeoutMs), 0x7fffffff) >>> 0, 14);
    this.#push(0, f);
  }

  /**
   * 'D': one dial attempt of `conn`, given up by the helper after `timeoutMs` (0: never);
   * answered by `dialed`. Once connected the helper relays at once.
   */
  dial(conn: number, attempt: number, timeoutMs: number, host: string, port: number): void {
    const a = this.#hostBytes(host);
    const f = newFrame(0x44, 19 + a.length);
    writeId(f, 5, conn);
    f.writeUInt32BE(attempt, 13);
    f.writeUInt32BE(Math.min(Math.ceil(timeoutMs), 0x7fffffff) >>> 0, 17);
    f.writeUInt16BE(port, 21);
    f[23] = a.length;
    a.copy(f, 24);
    this.#push(threadPipe(conn), f);
  }

  /** 'K': gives up on an attempt (its socket is reset; once relaying, the connection); no answer. */
  cancel(conn: number, attempt: number): void {
    const f = newFrame(0x4b, 12);
    writeId(f, 5, conn);
    f.writeUInt32BE(attempt, 13);
    this.#push(threadPipe(conn), f);
  }

  /**
   * 'C': closes a connection: FIN, RST on both sides, or a refusal (RST to a client that sent bytes
   * or whose hand-over dial is in flight, FIN otherwise); answered by `closed`.
   */
  close(conn: number, mode: CloseMode): void {
    const f = newFrame(0x43, 9);
    writeId(f, 5, conn);
    f[13] = mode === 'fin' ? 0 : mode === 'reset' ? 1 : 2;
    this.#push(threadPipe(conn), f);
  }

  /**
   * 'O': holds a connection for an accept policy: the helper reads the client into a buffer of at
   * most `maxBytes`, reports it ('h') and its going away ('c'), and writes it first after a dial.
   */
  hold(conn: number, maxBytes: number): void {
    const f = newFrame(0x4f, 12);
    writeId(f, 5, conn);
    f.writeUInt32BE(Math.min(maxBytes, 0x7fffffff) >>> 0, 13);
    this.#push(threadPipe(conn), f);
  }

  /**
   * A host's latin1 bytes, cached: a hand-over dials 10 000 clients to a few hundred endpoints, and
   * each dial encoded its host afresh. Bounded: past 4 096 hosts the cache starts over.
   */
  #hostBytes(host: string): Buffer {
    let a = this.#hosts.get(host);
    if (a === undefined) {
      if (this.#hosts.size >= 4096) this.#hosts.clear();
      a = Buffer.from(host, 'latin1');
      this.#hosts.set(host, a);
    }
    return a;
  }

  /** Queues a frame for a pipe; the frames of one event-loop turn go out in one write per pipe. */
  #push(pipe: number, frame: Buffer): void {
    if (this.isExited) return;
    const queue = this.#out[pipe];
    if (queue === undefined) return; // a connection id naming a thread this helper lacks
    queue.push(frame);
    if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(this.#flushNow);
    }
  }

  readonly #flushNow = (): void => this.flush();

  protected flush(): void {
    this.#scheduled = false;
    for (let i = 0; i < this.#out.length; i++) {
      const out = this.#out[i] as Buffer[];
      if (out.length === 0) continue;
      this.#out[i] = [];
      const pipe = this.#pipes[i];
      if (this.isExited || pipe == null || pipe.destroyed) continue;
      this.#events.wrote();
      pipe.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
    }
  }

  protected onFrame(b: Buffer, off: number, len: number): void {
    const e = this.#events;
    switch (b[off]) {
      case 0x61: // 'a' accepted
        if (len >= 16) {
          const n = Math.min(b[off + 15] as number, len - 16);
          // A pick dialled at once: u32 epoch, u16 port, addr after the client's address.
          const p = off + 16 + n;
          const picked = len >= 16 + n + 7;
          const pn = picked ? Math.min(b[p + 6] as number, len - 16 - n - 7) : 0;
          e.accepted(
            readId(b, off + 1),
            b.readUInt32BE(off + 9),
            b.toString('latin1', off + 16, p),
            b.readUInt16BE(off + 13),
            picked ? b.readUInt32BE(p) : 0,
            picked ? b.toString('latin1', p + 7, p + 7 + pn) : '',
            picked ? b.readUInt16BE(p + 4) : 0,
          );
        }
        return;
      case 0x64: // 'd' dialed
        if (len >= 17)
          e.dialed(readId(b, off + 1), b.readUInt32BE(off + 9), b.readInt32BE(off + 13));
        return;
      case 0x63: // 'c' closed
        if (len >= 26) {
          e.closed(
            readId(b, off + 1),
            readId(b, off + 9),
            readId(b, off + 17),
            CLOSE_HOW[b[off + 25] as number] ?? 'error',
          );
        }
        return;
      case 0x68: // 'h' held
        if (len >= 14) e.held(readId(b, off + 1), b.readUInt32BE(off + 9), b[off + 13] !== 0);
        return;
      case 0x70: // 'p' picks taken
        if (len >= 10)
          e.picksTaken(b.readUInt32BE(off + 1), b[off + 5] as number, b.readUInt32BE(off + 6));
        return;
      case 0x72: // 'r' refused at the helper's cap
        if (len >= 6) e.refused(b.readUInt32BE(off + 1));
        return;
      case 0x65: // 'e' accept error
        if (len >= 9) e.acceptError(b.readUInt32BE(off + 1), b.readInt32BE(off + 5));
        return;
      default:
        this.commonFrame(b, off, len);
        return;
    }
  }
}
