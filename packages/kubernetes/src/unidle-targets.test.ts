import { describe, expect, it } from 'vitest';
import { InvalidUnidleTargetsError, parseUnidleTargets, quoteForLog } from './unidle-targets.js';

const parse = (value: unknown, limits = {}) =>
  parseUnidleTargets(typeof value === 'string' ? value : JSON.stringify(value), 'ns/web', limits);

describe('parseUnidleTargets', () => {
  it("reads oc idle's list: kind, name, group or apiVersion, replicas", () => {
    const parsed = parse([
      { kind: 'Deployment', name: 'web', group: 'apps', replicas: 3 },
      { kind: 'StatefulSet', name: 'db', apiVersion: 'apps/v1', replicas: 2 },
      { kind: 'ReplicaSet', name: 'rs-1', replicas: 1 },
      { kind: 'Deployment', name: 'old', group: 'extensions', replicas: 4 },
    ]);
    expect(parsed.error).toBeUndefined();
    expect(parsed.targets).toEqual([
      { kind: 'Deployment', name: 'web', replicas: 3 },
      { kind: 'StatefulSet', name: 'db', replicas: 2 },
      { kind: 'ReplicaSet', name: 'rs-1', replicas: 1 },
      { kind: 'Deployment', name: 'old', replicas: 4 },
    ]);
    expect(parsed.targetIndex).toEqual([0, 1, 2, 3]);
  });

  it('treats a missing annotation as an empty list, without an error', () => {
    expect(parseUnidleTargets(undefined, 'ns/web')).toEqual({
      targets: [],
      entries: [],
      targetIndex: [],
    });
  });

  it('refuses the whole value when it is too long, not JSON or not a list', () => {
    for (const raw of ['{', '{"kind":"Deployment"}', 'null', 'x'.repeat(20_000)]) {
      const parsed = parseUnidleTargets(raw, 'ns/web');
      expect(parsed.targets).toEqual([]);
      expect(parsed.error).toBeInstanceOf(InvalidUnidleTargetsError);
      expect(parsed.error?.code).toBe('ERR_INVALID_UNIDLE_TARGETS');
      expect(parsed.error?.message.length).toBeLessThan(300);
    }
    expect(parse('[]', { maxBytes: 1 }).error?.message).toContain('more than the limit of 1');
  });

  it('skips the entries it cannot scale and keeps the others', () => {
    const parsed = parse([
      { kind: 'DeploymentConfig', name: 'dc', group: 'apps.openshift.io', replicas: 1 },
      { kind: 'ReplicationController', name: 'rc', replicas: 1 },
      { kind: 'Deployment', name: 'Bad_Name', replicas: 1 },
      { kind: 'Deployment', name: 'zero', replicas: 0 },
      { kind: 'Deployment', name: 'frac', replicas: 1.5 },
      { kind: 'Deployment', name: 'other', group: 'example.com', replicas: 1 },
      'a string',
      { kind: 'Deployment', name: 'good', replicas: 2 },
    ]);
    expect(parsed.targets).toEqual([{ kind: 'Deployment', name: 'good', replicas: 2 }]);
    expect(parsed.targetIndex).toEqual([-1, -1, -1, -1, -1, -1, -1, 0]);
    expect(parsed.error?.problems).toHaveLength(6); // five shown, then "and 2 more"
    expect(parsed.error?.problems.at(-1)).toBe('and 2 more problem(s)');
  });

  it('scales a duplicate once, and caps the number of entries', () => {
    const dup = parse([
      { kind: 'Deployment', name: 'web', replicas: 3 },
      { kind: 'Deployment', name: 'web', replicas: 5 },
    ]);
    expect(dup.targets).toEqual([{ kind: 'Deployment', name: 'web', replicas: 3 }]);
    expect(dup.targetIndex).toEqual([0, 0]);
    const many = parse(
      Array.from({ length: 40 }, (_, i) => ({ kind: 'Deployment', name: `d${i}`, replicas: 1 })),
    );
    expect(many.targets).toHaveLength(32);
    expect(many.entries).toHaveLength(40);
    expect(many.error?.message).toContain('40 entries, more than the limit of 32');
  });

  it('quotes, escapes and cuts what it puts in a log line', () => {
    const q = quoteForLog(`evil\nline ${'x'.repeat(200)}`);
    expect(q).not.toContain('\n');
    expect(q.startsWith('"evil\\nline')).toBe(true);
    expect(q.length).toBeLessThan(80);
    const parsed = parseUnidleTargets(
      `[{"kind":"Deployment\\n","name":"a","replicas":1}]`,
      'ns/web',
    );
    expect(parsed.error?.message).not.toContain('\n');
  });
});
