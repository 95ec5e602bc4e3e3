import { describe, expect, it } from 'vitest';
import { PortConflictError } from '../errors.js';
import { claimKeyString, NodePortClaims } from './node-port-claims.js';

describe('NodePortClaims', () => {
  it('grants a free claim and is idempotent for its owner', () => {
    const c = new NodePortClaims();
    expect(c.claim('10.0.0.1', 30080, 'TCP', 'ns/a').ok).toBe(true);
    expect(c.claim('10.0.0.1', 30080, 'TCP', 'ns/a').ok).toBe(true);
    expect(c.size).toBe(1);
    expect(c.owner('10.0.0.1', 30080, 'TCP')).toBe('ns/a');
  });

  it('refuses another owner with a PortConflictError naming both', () => {
    const c = new NodePortClaims();
    c.claim('10.0.0.1', 30080, 'TCP', 'ns/a');
    const r = c.claim('10.0.0.1', 30080, 'TCP', 'ns/b');
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.owner).toBe('ns/a');
    expect(r.error).toBeInstanceOf(PortConflictError);
    expect(r.error.code).toBe('ERR_PORT_CONFLICT');
    expect(r.error.message).toContain('10.0.0.1:30080/TCP');
    expect(r.error.message).toContain('ns/b vs ns/a');
  });

  it('keeps protocols, ports and addresses apart', () => {
    const c = new NodePortClaims();
    c.claim('10.0.0.1', 30080, 'TCP', 'ns/a');
    expect(c.claim('10.0.0.1', 30080, 'UDP', 'ns/b').ok).toBe(true);
    expect(c.claim('10.0.0.1', 30081, 'TCP', 'ns/b').ok).toBe(true);
    expect(c.claim('10.0.0.2', 30080, 'TCP', 'ns/b').ok).toBe(true);
  });

  it('makes every-address claims conflict with specific ones both ways', () => {
    const c = new NodePortClaims();
    c.claim(null, 30080, 'TCP', 'ns/a');
    expect(c.claim('10.0.0.1', 30080, 'TCP', 'ns/b').ok).toBe(false);
    const d = new NodePortClaims();
    d.claim('10.0.0.1', 30080, 'TCP', 'ns/a');
    expect(d.claim(null, 30080, 'TCP', 'ns/b').ok).toBe(false);
    expect(d.claim(null, 30080, 'TCP', 'ns/a').ok).toBe(true);
  });

  it('hands the waiters back on release, and lets them claim', () => {
    const c = new NodePortClaims();
    c.claim(null, 30080, 'TCP', 'ns/a');
    c.claim(null, 30080, 'TCP', 'ns/b');
    c.claim(null, 30080, 'TCP', 'ns/c');
    expect(c.waiters(30080, 'TCP')).toEqual(['ns/b', 'ns/c']);
    expect(c.release(null, 30080, 'TCP', 'ns/a')).toEqual(['ns/b', 'ns/c']);
    expect(c.waiters(30080, 'TCP')).toEqual([]);
    expect(c.claim(null, 30080, 'TCP', 'ns/b').ok).toBe(true);
    expect(c.claim(null, 30080, 'TCP', 'ns/c').ok).toBe(false);
    expect(c.waiters(30080, 'TCP')).toEqual(['ns/c']);
  });

  it('ignores a release by a non-owner and lets waiters withdraw', () => {
    const c = new NodePortClaims();
    c.claim(null, 30080, 'TCP', 'ns/a');
    c.claim(null, 30080, 'TCP', 'ns/b');
    expect(c.release(null, 30080, 'TCP', 'ns/b')).toEqual([]);
    expect(c.owner(null, 30080, 'TCP')).toBe('ns/a');
    c.withdraw(30080, 'TCP', 'ns/b');
    expect(c.release(null, 30080, 'TCP', 'ns/a')).toEqual([]);
    expect(c.size).toBe(0);
  });

  it('names keys like the reference', () => {
    expect(claimKeyString(null, 30080, 'UDP')).toBe('*:30080/UDP');
    expect(claimKeyString('fd00::1', 80, 'TCP')).toBe('[fd00::1]:80/TCP');
  });
});
