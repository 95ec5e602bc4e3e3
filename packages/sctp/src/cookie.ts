/**
 * The State Cookie (RFC 9260 §5.1.3): everything the listener needs to build the association is
 * carried by the peer and signed with HMAC-SHA-256, so an INIT costs the listener no state and a
 * flood of INITs no memory. The cookie is bound to the peer's address and ports.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/** What the cookie carries. */
export interface CookieContents {
  /** Milliseconds (wall clock) when the INIT ACK was made; old cookies are stale. */
  readonly createdAt: number;
  readonly localTag: number;
  readonly peerTag: number;
  readonly localInitialTsn: number;
  readonly peerInitialTsn: number;
  readonly peerRwnd: number;
  readonly outboundStreams: number;
  readonly inboundStreams: number;
  readonly localPort: number;
  readonly peerPort: number;
}

/** A cookie whose MAC is good but whose life is over. */
export interface StaleCookie {
  readonly staleByMs: number;
  readonly contents: CookieContents;
}

const BODY = 40;
const MAC = 32;
/** Bytes of a cookie: the body and its MAC. */
export const COOKIE_BYTES = BODY + MAC;

/** Signs and verifies cookies with a key made at construction (per listener endpoint). */
export class CookieSigner {
  private readonly key: Buffer;

  constructor(key: Buffer = randomBytes(32)) {
    this.key = key;
  }

  private mac(body: Buffer, peerAddress: string): Buffer {
    return createHmac('sha256', this.key).update(body).update(peerAddress).digest();
  }

  /** Makes the cookie for an INIT from `peerAddress`. */
  sign(c: CookieContents, peerAddress: string): Buffer {
    const b = Buffer.alloc(COOKIE_BYTES);
    b.writeUInt8(1, 0);
    b.writeDoubleBE(c.createdAt, 4);
    b.writeUInt32BE(c.localTag >>> 0, 12);
    b.writeUInt32BE(c.peerTag >>> 0, 16);
    b.writeUInt32BE(c.localInitialTsn >>> 0, 20);
    b.writeUInt32BE(c.peerInitialTsn >>> 0, 24);
    b.writeUInt32BE(c.peerRwnd >>> 0, 28);
    b.writeUInt16BE(c.outboundStreams, 32);
    b.writeUInt16BE(c.inboundStreams, 34);
    b.writeUInt16BE(c.localPort, 36);
    b.writeUInt16BE(c.peerPort, 38);
    this.mac(b.subarray(0, BODY), peerAddress).copy(b, BODY);
    return b;
  }

  /**
   * The contents of a cookie echoed by `peerAddress`, or a reason it is refused: `bad-cookie` for a
   * wrong size, version or MAC, and for a good MAC older than `lifetimeMs` its contents with how
   * long past its life it is (for the Stale Cookie error the peer is owed).
   */
  verify(
    cookie: Buffer,
    peerAddress: string,
    nowWall: number,
    lifetimeMs: number,
  ): CookieContents | 'bad-cookie' | StaleCookie {
    if (cookie.length !== COOKIE_BYTES || cookie[0] !== 1) return 'bad-cookie';
    const expected = this.mac(cookie.subarray(0, BODY), peerAddress);
    if (!timingSafeEqual(expected, cookie.subarray(BODY))) return 'bad-cookie';
    const createdAt = cookie.readDoubleBE(4);
    const contents = {
      createdAt,
      localTag: cookie.readUInt32BE(12),
      peerTag: cookie.readUInt32BE(16),
      localInitialTsn: cookie.readUInt32BE(20),
      peerInitialTsn: cookie.readUInt32BE(24),
      peerRwnd: cookie.readUInt32BE(28),
      outboundStreams: cookie.readUInt16BE(32),
      inboundStreams: cookie.readUInt16BE(34),
      localPort: cookie.readUInt16BE(36),
      peerPort: cookie.readUInt16BE(38),
    };
    if (!(nowWall - createdAt <= lifetimeMs) || createdAt > nowWall + 1000) {
      const staleByMs = Number.isFinite(createdAt)
        ? Math.max(0, nowWall - createdAt - lifetimeMs)
        : 0;
      return { staleByMs, contents };
    }
    return contents;
  }
}
