import { describe, expect, it } from 'vitest';
import { createLogger, deferredComponentLogger, type Logger, noopLogger } from './logger.js';

/** A parent that counts its sub-loggers and records what they write. */
function recordingParent(minLevel?: number) {
  const lines: string[] = [];
  let made = 0;
  const child = (name: string): Logger => {
    const write =
      (level: string) =>
      (...args: unknown[]) => {
        lines.push(`${name} ${level} ${args.join(' ')}`);
      };
    return {
      silly: write('silly'),
      trace: write('trace'),
      debug: write('debug'),
      info: write('info'),
      warn: write('warn'),
      error: write('error'),
      fatal: write('fatal'),
      getSubLogger: (s) => child(`${name}:${s?.name}`),
    };
  };
  const parent: Logger & { settings?: { minLevel: number } } = {
    ...child('root'),
    getSubLogger: (s) => {
      made++;
      return child(`${s?.name}`);
    },
  };
  if (minLevel !== undefined) parent.settings = { minLevel };
  return { parent, lines, made: () => made };
}

describe('deferredComponentLogger', () => {
  it('makes the sub-logger on the first line, once, with the component name', () => {
    const { parent, lines, made } = recordingParent();
    const log = deferredComponentLogger(parent, 'default/web:http');
    expect(made()).toBe(0);
    log.warn('a', 1);
    log.info('b');
    expect(made()).toBe(1);
    expect(lines).toEqual(['default/web:http warn a 1', 'default/web:http info b']);
    expect(log.getSubLogger({ name: 'dial' })).toBeDefined();
    expect(made()).toBe(1);
  });

  it("drops a line below the parent's minLevel without making the sub-logger", () => {
    const { parent, lines, made } = recordingParent(3);
    const log = deferredComponentLogger(parent, 'x');
    log.silly('s');
    log.trace('t');
    log.debug('d');
    expect(made()).toBe(0);
    log.info('i');
    log.error('e');
    log.fatal('f');
    expect(made()).toBe(1);
    expect(lines).toEqual(['x info i', 'x error e', 'x fatal f']);
  });

  it('is the silent logger when there is none to defer to', () => {
    expect(deferredComponentLogger(undefined, 'x')).toBe(noopLogger);
    expect(deferredComponentLogger(noopLogger, 'x')).toBe(noopLogger);
  });

  it("writes a tslog line with the component's name and honours its level", () => {
    const out: string[] = [];
    const root = createLogger({ format: 'json', minLevel: 3, write: (l) => out.push(l) });
    const log = deferredComponentLogger(root.getSubLogger({ name: 'proxier' }), 'ns/svc:p');
    log.debug('hidden');
    log.warn('shown');
    expect(out).toHaveLength(1);
    expect(out[0]).toContain('shown');
    expect(out[0]).toContain('ns/svc:p');
  });
});
