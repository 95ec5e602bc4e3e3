import { describe, expect, it } from 'vitest';
import {
  namespacedKey,
  objectKey,
  splitObjectKey,
  tryObjectKey,
  tryObjectName,
  UNKNOWN_KEY,
} from './object-key.js';

describe('object keys', () => {
  it('joins namespace and name, defaulting the namespace', () => {
    expect(objectKey({ metadata: { name: 'web', namespace: 'ns' } })).toBe('ns/web');
    expect(objectKey({ metadata: { name: 'web' } })).toBe('default/web');
    expect(objectKey({ metadata: { name: 'web', namespace: '' } })).toBe('default/web');
    expect(objectKey({ metadata: { name: 'web', namespace: null } })).toBe('default/web');
  });

  it('has no key for objects without a usable identity, and never throws', () => {
    const throwing = {
      get metadata(): never {
        throw new Error('x');
      },
    };
    for (const value of [
      undefined,
      null,
      42,
      'ns/web',
      {},
      { metadata: null },
      { metadata: { name: '' } },
      { metadata: { name: 5 } },
      { metadata: { name: 'a', namespace: 5 } },
      throwing,
    ]) {
      expect(tryObjectKey(value)).toBeUndefined();
      expect(tryObjectName(value)).toBeUndefined();
      expect(objectKey(value)).toBe(UNKNOWN_KEY);
    }
  });

  it('gives the parts of the key too', () => {
    expect(tryObjectName({ metadata: { name: 'web' } })).toEqual({
      namespace: 'default',
      name: 'web',
      key: 'default/web',
    });
    expect(tryObjectName({ metadata: { name: 'web', namespace: 'ns' } })?.key).toBe('ns/web');
  });

  it('splits keys back', () => {
    expect(splitObjectKey('ns/web')).toEqual({ namespace: 'ns', name: 'web' });
    expect(splitObjectKey('web')).toBeUndefined();
    expect(splitObjectKey('/web')).toBeUndefined();
    expect(splitObjectKey('ns/')).toBeUndefined();
    expect(splitObjectKey(UNKNOWN_KEY)).toBeUndefined();
  });
});

describe('namespacedKey', () => {
  it('is the "namespace/name" string, for any number of namespaces', () => {
    expect(namespacedKey('ns', 'a')).toBe('ns/a');
    expect(namespacedKey('ns', 'b')).toBe('ns/b');
    // More namespaces than the prefix cache holds: it starts over, the keys stay right.
    for (let i = 0; i < 5_000; i++) expect(namespacedKey(`n${i}`, 'x')).toBe(`n${i}/x`);
    expect(namespacedKey('ns', 'a')).toBe('ns/a');
    expect(tryObjectKey({ metadata: { namespace: 'ns', name: 'a' } })).toBe('ns/a');
  });
});
