import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  parseIperfTcp,
  parseIperfUdp,
  parseProcStat,
  parseSockperf,
  parseVmRss,
  parseWrk,
  ToolOutputError,
} from './parse.js';

/** Outputs captured from the Debian 12 tools (iperf3 3.12, wrk 4.1.0, sockperf 3.7) on loopback. */
const fixture = (name: string) =>
  readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8');

describe('iperf3 JSON', () => {
  it('reads TCP throughput and bytes from the receiver side', () => {
    const r = parseIperfTcp(fixture('iperf3-tcp-2-streams.json.txt'));
    expect(r.bitsPerSecond / 1e9).toBeCloseTo(23.96, 2);
    expect(r.bytes).toBeGreaterThan(2.9e9);
    expect(r.seconds).toBeCloseTo(1, 1);
  });

  it('reads UDP datagrams delivered as packets minus lost over seconds', () => {
    const r = parseIperfUdp(fixture('iperf3-udp-64-unlimited.json.txt'));
    expect(r.lostPackets).toBe(152_787);
    expect(r.deliveredPps).toBeCloseTo((273_431 - 152_787) / 1.001064, 3);
    expect(r.sentPackets).toBe(273_980);
    expect(r.lostPercent).toBeCloseTo(55.77, 2);
  });

  it('reads the loss of a fixed-rate UDP test', () => {
    const r = parseIperfUdp(fixture('iperf3-udp-64-fixed.json.txt'));
    expect(r.lostPercent).toBeCloseTo(0.156, 3);
    expect(r.deliveredPps).toBeGreaterThan(49_000);
  });

  it('turns iperf3 errors and garbage into ToolOutputError', () => {
    expect(() =>
      parseIperfTcp('{"start":{},"error":"unable to connect to server: Connection refused"}'),
    ).toThrow(/Connection refused/);
    expect(() => parseIperfTcp('iperf3: error - the server is busy')).toThrow(ToolOutputError);
    expect(() => parseIperfUdp('{"end":{"sum_received":{"packets":1}}}')).toThrow(/lost_packets/);
    expect(() => parseIperfUdp('[1]')).toThrow(ToolOutputError);
  });
});

describe('wrk', () => {
  it('reads requests/s (= new connections/s with Connection: close)', () => {
    const r = parseWrk(fixture('wrk-c32.txt'));
    expect(r.requestsPerSecond).toBeCloseTo(17_591.96, 2);
    expect(r.requests).toBe(17_704);
    expect(r.errors).toBe(0);
  });

  it('counts socket errors and non-2xx responses', () => {
    expect(parseWrk(fixture('wrk-errors.txt'))).toEqual({
      requestsPerSecond: 0,
      requests: 0,
      errors: 19_424,
    });
    const non2xx = `${fixture('wrk-c1.txt')}  Non-2xx or 3xx responses: 7\n`;
    expect(parseWrk(non2xx).errors).toBe(7);
  });

  it('refuses output without a summary', () => {
    expect(() => parseWrk('unable to connect to 127.0.0.1:1 Connection refused')).toThrow(
      ToolOutputError,
    );
  });
});

describe('sockperf', () => {
  it('reads the median half round trip through the colour escapes', () => {
    const tcp = parseSockperf(fixture('sockperf-tcp.txt'));
    expect(tcp).toEqual({ medianUs: 3.57, avgUs: 4.283, p99Us: 9.951, observations: 63_779 });
    expect(parseSockperf(fixture('sockperf-udp.txt')).medianUs).toBeCloseTo(4.481, 3);
  });

  it('reports a server that did not answer', () => {
    expect(() => parseSockperf(fixture('sockperf-no-reply.txt'))).toThrow(/no reply/);
  });
});

describe('/proc', () => {
  it('counts stat fields from the last parenthesis, whatever the command name holds', () => {
    const line =
      '4242 (nginx: worker (x) y) S 4241 4241 4241 0 -1 4194624 300 0 0 0 150 70 9 4 20 0 1 0 1234 1000 200';
    expect(parseProcStat(line)).toEqual({ pid: 4242, ppid: 4241, ownTicks: 220, childTicks: 13 });
    expect(() => parseProcStat('garbage')).toThrow(ToolOutputError);
  });

  it('reads VmRSS in bytes, 0 when absent', () => {
    expect(parseVmRss('Name:\tnode\nVmRSS:\t   51200 kB\nRssAnon:\t1 kB\n')).toBe(51_200 * 1024);
    expect(parseVmRss('Name:\tzombie\n')).toBe(0);
  });
});
