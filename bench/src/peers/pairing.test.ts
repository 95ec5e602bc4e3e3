import { describe, expect, it } from 'vitest';
import { pairedRatios, present, summarize } from './pairing.js';
import { rotate } from './run.js';
import { sampleResult } from './sample-result.js';

describe('pairing', () => {
  it('divides each repetition by the direct figure of the same repetition', () => {
    // Unpaired medians would give 12 / 20 = 0.6; paired, the drift of direct cancels out.
    expect(pairedRatios([20, 10, 30], [10, 6, 12])).toEqual([0.5, 0.6, 0.4]);
  });

  it('leaves out repetitions where either figure is missing or direct is not positive', () => {
    expect(pairedRatios([20, null, 0, 10, Number.NaN], [10, 5, 5, null, 3])).toEqual([0.5]);
    expect(pairedRatios([1, 2], [1])).toEqual([1]);
    expect(present([1, null, Number.NaN, 2])).toEqual([1, 2]);
  });

  it('summarizes medians and min–max of values and of paired ratios', () => {
    const s = summarize(sampleResult());
    expect(s.tcp1?.haproxy?.ratio).toEqual({ median: 0.5, min: 0.4, max: 0.6 });
    expect(s.tcp1?.daemon?.ratio).toEqual({ median: 0.7, min: 0.7, max: 0.7 });
    expect(s.tcp1?.direct?.value?.median).toBe(20);
    expect(s.tcp1?.direct?.ratio).toBeUndefined();
    // Absolute measures carry no ratio; a missing repetition shrinks n.
    expect(s.cpu1?.daemon).toEqual({ value: { median: 0.45, min: 0.4, max: 0.5 }, n: 2 });
    expect(s.rttTcp?.daemon?.ratio?.median).toBeCloseTo(2, 5);
    // A subject without any figure for a measure (HAProxy has no UDP) has no cell.
    expect(s.udp64?.haproxy).toBeUndefined();
  });

  it('rotates the order of subjects per repetition', () => {
    expect(rotate(['a', 'b', 'c'], 0)).toEqual(['a', 'b', 'c']);
    expect(rotate(['a', 'b', 'c'], 4)).toEqual(['b', 'c', 'a']);
    expect(rotate(['a', 'b', 'c'], -1)).toEqual(['c', 'a', 'b']);
    expect(rotate([], 3)).toEqual([]);
  });
});
