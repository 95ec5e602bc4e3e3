import type { PeersResult } from './model.js';

/**
 * A small made-up run for the tests of the pairing, the report and the chart: three repetitions,
 * direct drifting between them (so paired and unpaired ratios differ), a missing repetition, HAProxy
 * without UDP, a skipped peer.
 */
export function sampleResult(): PeersResult {
  return {
    startedAt: '2026-12-01T09:00:00.000Z',
    finishedAt: '2026-12-01T09:14:00.000Z',
    reps: 3,
    quick: false,
    subjects: ['direct', 'haproxy', 'daemon'],
    samples: {
      tcp1: { direct: [20, 10, 30], haproxy: [10, 6, 12], daemon: [14, 7, 21] },
      cpu1: { haproxy: [0.6, 0.7, 0.65], daemon: [0.4, null, 0.5] },
      udp64: { direct: [300_000, 280_000, 290_000], daemon: [80_000, 90_000, 100_000] },
      rttTcp: { direct: [25, 26, 27], haproxy: [35, 39, 40], daemon: [52, 52, 54] },
      idleRss: { haproxy: [3.3, 3.2, 3.4], daemon: [5.4, 5.5, 5.3] },
    },
    versions: { node: 'v20.20.2', haproxy: '2.6.12' },
    method: 'Each run lasts 3 s.',
    load: { start: 1.2, end: 1.9 },
    notes: ['nginx skipped: nginx or libnginx-mod-stream is not installed.'],
  };
}
