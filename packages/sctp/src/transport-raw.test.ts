import { describe, expect, it } from 'vitest';
import { createRawSctpEngine } from './transport-raw.js';
import { errnoName } from './transport-raw-helper.js';

/** What needs neither root nor a namespace; the rest is in transport-raw-netns.test.ts. */
describe('raw SCTP engine', () => {
  it('refuses IPv6 with ERR_SCTP_RAW_IPV4_ONLY before starting anything', async () => {
    const e = createRawSctpEngine({ helper: { helperPath: '/nonexistent/helper' } });
    await expect(e.listen({ address: '::1', port: 9 })).rejects.toMatchObject({
      code: 'ERR_SCTP_RAW_IPV4_ONLY',
    });
    await expect(e.connect({ address: '2001:db8::1', port: 9 })).rejects.toMatchObject({
      code: 'ERR_SCTP_RAW_IPV4_ONLY',
    });
    await expect(
      e.connect({ address: '192.0.2.1', port: 9, localAddress: '::' }),
    ).rejects.toMatchObject({ code: 'ERR_SCTP_RAW_IPV4_ONLY' });
    await e.close();
  });

  it('opens nothing until used, and reports a helper that cannot run with ERR_SCTP_RAW_HELPER', async () => {
    const e = createRawSctpEngine({ helper: { helperPath: '/nonexistent/helper' } });
    expect(e.counters).toEqual({ packetsIn: 0, packetsOut: 0, sendErrors: 0, sendDropped: 0 });
    await expect(e.listen({ address: '127.0.0.1', port: 9 })).rejects.toMatchObject({
      code: 'ERR_SCTP_RAW_HELPER',
    });
    await expect(e.start()).rejects.toMatchObject({ code: 'ERR_SCTP_RAW_HELPER' });
    await e.close();
  });

  it('names errno values', () => {
    expect(errnoName(1)).toBe('EPERM');
    expect(errnoName(99)).toBe('EADDRNOTAVAIL');
    expect(errnoName(100_000)).toBe('errno 100000');
  });
});
