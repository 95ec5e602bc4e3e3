/**
 * The hostile-peer tests' harness: memory links with short timers whose endpoints must end every
 * test without a contained exception, and a set-up association whose client the test speaks for
 * with crafted packets (hostile.test.ts, hostile-lifecycle.test.ts).
 */
import { afterEach, expect } from 'vitest';
import { waitFor } from '../../../core/src/test-support/wait-for.js';
import type { Association } from '../association.js';
import type { SctpMessage } from '../association-types.js';
import { craft } from './craft.js';
import { type MemoryLink, memoryLink } from './memory-link.js';

/** Short timers, no heartbeats: failures show within a test's time. */
export const OPTS = {
  rtoInitial: 50,
  rtoMin: 50,
  rtoMax: 200,
  maxRetransmits: 4,
  heartbeatInterval: 0,
};

/** One turn of the event loop (memory links deliver on setImmediate). */
export const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

/** An established association of a memory link, with both directions captured. */
export interface Setup {
  link: MemoryLink;
  client: Association;
  server: Association;
  /** Everything the server sent since the setup. */
  fromServer: Buffer[];
  /** Everything the client sent since the setup. */
  fromClient: Buffer[];
  got: SctpMessage[];
  /** Delivers a crafted packet to the server as if the client had sent it. */
  toServer(vtag: number, chunks: Parameters<typeof craft>[3]): void;
  /** Delivers a crafted packet to the client as if the server had sent it. */
  toClient(vtag: number, chunks: Parameters<typeof craft>[3]): void;
}

/**
 * Registers the afterEach that checks and closes the links; call at a test file's top level.
 * `links` takes links a test makes itself.
 */
export function useHostileLinks(): {
  links: MemoryLink[];
  setup(
    opts?: Parameters<typeof memoryLink>[0],
    limits?: Parameters<typeof memoryLink>[2],
  ): Promise<Setup>;
} {
  const links: MemoryLink[] = [];
  afterEach(async () => {
    for (const l of links.splice(0)) {
      expect(l.a.counters.exceptions).toBe(0);
      expect(l.b.counters.exceptions).toBe(0);
      await l.a.close();
      await l.b.close();
    }
  });
  const setup = async (
    opts: Parameters<typeof memoryLink>[0] = {},
    limits: Parameters<typeof memoryLink>[2] = {},
  ): Promise<Setup> => {
    const link = memoryLink({ ...OPTS, ...opts }, undefined, limits);
    links.push(link);
    const client = link.connect();
    await waitFor(
      () => client.state === 'established' && link.accepted.length === 1,
      5_000,
      'established',
    );
    const server = link.accepted[0] as Association;
    const got: SctpMessage[] = [];
    server.on('message', (m) => got.push(m));
    const fromServer: Buffer[] = [];
    const fromClient: Buffer[] = [];
    link.socketB.tap = (p) => fromServer.push(Buffer.from(p));
    link.socketA.tap = (p) => fromClient.push(Buffer.from(p));
    return {
      link,
      client,
      server,
      fromServer,
      fromClient,
      got,
      toServer: (vtag, chunks) =>
        link.b.receive(craft(client.localPort, 5000, vtag, chunks), '10.0.0.1', 1001),
      toClient: (vtag, chunks) =>
        link.a.receive(craft(5000, client.localPort, vtag, chunks), '10.0.0.2', 1002),
    };
  };
  return { links, setup };
}
