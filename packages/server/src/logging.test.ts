import { describe, expect, it } from 'vitest';
import { createDaemonLogger, verbosityToMinLevel } from './logging.js';

describe('verbosityToMinLevel', () => {
  it('maps klog verbosity onto tslog levels', () => {
    expect([0, 1, 2, 3, 4, 5, 9].map(verbosityToMinLevel)).toEqual([3, 2, 2, 1, 1, 0, 0]);
  });
});

describe('createDaemonLogger', () => {
  it('writes JSON lines with the component name, at the chosen verbosity', () => {
    const lines: string[] = [];
    const log = createDaemonLogger({ format: 'json', verbosity: 0, write: (l) => lines.push(l) });
    const sub = log.getSubLogger({ name: 'daemon' });
    sub.info('started', { port: 1 });
    sub.debug('hidden at -v 0');
    expect(lines).toHaveLength(1);
    const entry = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(entry['0']).toBe('started');
    expect(entry['1']).toEqual({ port: 1 });
    expect(entry._meta).toMatchObject({
      name: 'daemon',
      parentNames: ['userspace-proxy'],
      logLevelName: 'INFO',
    });
  });

  it('writes text lines, and survives cycles', () => {
    const lines: string[] = [];
    const log = createDaemonLogger({
      format: 'text',
      verbosity: 2,
      colors: false,
      write: (l) => lines.push(l),
    });
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic.self = cyclic;
    log.debug('shown at -v 2', cyclic);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/\tDEBUG\t.*userspace-proxy\tshown at -v 2/);
    const json = createDaemonLogger({ format: 'json', verbosity: 0, write: (l) => lines.push(l) });
    expect(() => json.info('cycle', cyclic)).not.toThrow();
  });
});
