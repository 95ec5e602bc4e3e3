import type { InformerEventHandler, SharedInformer } from '@userspace-proxy/core';
import { describe, expect, it } from 'vitest';
import {
  isNodeEligible,
  NodeInfo,
  type NodeLike,
  nodeIPsOf,
  TO_BE_DELETED_TAINT,
} from './node-info.js';

function addrs(...pairs: [string, string][]): NodeLike {
  return {
    metadata: { name: 'n1' },
    status: { addresses: pairs.map(([type, address]) => ({ type, address })) },
  };
}

class Emitter implements SharedInformer<NodeLike> {
  handlers: InformerEventHandler<NodeLike>[] = [];
  addEventHandler(h: InformerEventHandler<NodeLike>): void {
    this.handlers.push(h);
  }
  hasSynced(): boolean {
    return true;
  }
}

describe('nodeIPsOf', () => {
  it('prefers InternalIP, then adds the first IP of the other family', () => {
    expect(
      nodeIPsOf(
        addrs(
          ['ExternalIP', '203.0.113.5'],
          ['Hostname', 'n1'],
          ['InternalIP', '10.0.0.5'],
          ['InternalIP', 'fd00::5'],
        ),
      ),
    ).toEqual(['10.0.0.5', 'fd00::5']);
    expect(nodeIPsOf(addrs(['ExternalIP', '203.0.113.5'], ['ExternalIP', '2001:db8::1']))).toEqual([
      '203.0.113.5',
      '2001:db8::1',
    ]);
    expect(nodeIPsOf(addrs(['InternalIP', 'fd00::5'], ['ExternalIP', '203.0.113.5']))).toEqual([
      'fd00::5',
      '203.0.113.5',
    ]);
  });

  it('skips junk and returns nothing for an unknown node', () => {
    expect(nodeIPsOf(undefined)).toEqual([]);
    expect(nodeIPsOf(addrs(['InternalIP', 'not-an-ip'], ['InternalIP', '10.0.0.1']))).toEqual([
      '10.0.0.1',
    ]);
    const junk = {
      metadata: { name: 'n1' },
      status: { addresses: [null, 7, { type: 'InternalIP' }] },
    };
    expect(nodeIPsOf(junk as unknown as NodeLike)).toEqual([]);
    expect(nodeIPsOf({ metadata: { name: 'n1' }, status: { addresses: null } })).toEqual([]);
  });
});

describe('isNodeEligible', () => {
  it('follows KEP-3836: unknown, deleting or autoscaler-tainted nodes are not eligible', () => {
    expect(isNodeEligible(undefined)).toBe(false);
    expect(isNodeEligible({ metadata: { name: 'n' } })).toBe(true);
    expect(
      isNodeEligible({ metadata: { name: 'n', deletionTimestamp: '2024-01-01T00:00:00Z' } }),
    ).toBe(false);
    expect(isNodeEligible({ metadata: { name: 'n', deletionTimestamp: new Date() } })).toBe(false);
    expect(
      isNodeEligible({
        metadata: { name: 'n' },
        spec: { taints: [{ key: TO_BE_DELETED_TAINT, effect: 'NoSchedule' }] },
      }),
    ).toBe(false);
    expect(
      isNodeEligible({
        metadata: { name: 'n' },
        spec: { taints: [{ key: 'other', effect: 'NoSchedule' }] },
      }),
    ).toBe(true);
  });
});

describe('NodeInfo', () => {
  it('follows only its own node through add, update and delete', () => {
    const inf = new Emitter();
    const info = new NodeInfo(inf, 'n1');
    const [h] = inf.handlers as [InformerEventHandler<NodeLike>];
    expect(info.nodeEligible()).toBe(false);
    h.onAdd({
      metadata: { name: 'other' },
      status: { addresses: [{ type: 'InternalIP', address: '10.9.9.9' }] },
    });
    expect(info.nodeIPs()).toEqual([]);
    const n1 = addrs(['InternalIP', '10.0.0.1']);
    h.onAdd(n1);
    expect(info.nodeIPs()).toEqual(['10.0.0.1']);
    expect(info.nodeEligible()).toBe(true);
    const tainted = { ...n1, spec: { taints: [{ key: TO_BE_DELETED_TAINT }] } };
    h.onUpdate(n1, tainted);
    expect(info.nodeEligible()).toBe(false);
    h.onUpdate(tainted, n1);
    expect(info.nodeEligible()).toBe(true);
    h.onDelete({ key: 'n1', obj: n1 });
    expect(info.nodeEligible()).toBe(false);
    expect(info.node()).toBeUndefined();
  });

  it('tells listeners about every change of its own node, and one that throws does not stop the rest', () => {
    const inf = new Emitter();
    const info = new NodeInfo(inf, 'n1');
    const [h] = inf.handlers as [InformerEventHandler<NodeLike>];
    const seen: string[] = [];
    info.onChange(() => {
      throw new Error('listener bug');
    });
    const remove = info.onChange(() => seen.push(info.nodeIPs().join(',') || 'none'));
    h.onAdd({ metadata: { name: 'other' } });
    const n1 = addrs(['InternalIP', '10.0.0.1']);
    h.onAdd(n1);
    h.onUpdate(n1, addrs(['InternalIP', '10.0.0.2']));
    h.onDelete(n1);
    expect(seen).toEqual(['10.0.0.1', '10.0.0.2', 'none']);
    remove();
    h.onAdd(n1);
    expect(seen).toHaveLength(3);
  });

  it('whenKnown resolves once the node is seen, or false on abort', async () => {
    const inf = new Emitter();
    const info = new NodeInfo(inf, 'n1');
    const [h] = inf.handlers as [InformerEventHandler<NodeLike>];
    const ac = new AbortController();
    const waiting = info.whenKnown(ac.signal);
    h.onAdd({ metadata: { name: 'other' } });
    h.onAdd(addrs(['InternalIP', '10.0.0.1']));
    expect(await waiting).toBe(true);
    expect(await info.whenKnown(ac.signal)).toBe(true);
    const other = new NodeInfo(new Emitter(), 'n2');
    const pending = other.whenKnown(ac.signal);
    ac.abort();
    expect(await pending).toBe(false);
    expect(await other.whenKnown(ac.signal)).toBe(false);
  });
});
