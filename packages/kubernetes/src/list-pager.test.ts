import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ListLimitError } from './list-errors.js';
import { makePagedList, type PagedListOptions } from './list-pager.js';
import { FakeApiServer } from './test-support/fake-apiserver.js';
import {
  hasControlChars,
  kubeConfigFor,
  recordingLogger,
  service,
} from './test-support/helpers.js';
import { endlessContinue, trickleList } from './test-support/hostile-responses.js';

let server: FakeApiServer;
let stopTrickle: (() => void) | undefined;

beforeEach(async () => {
  server = await FakeApiServer.start();
  stopTrickle = undefined;
});

afterEach(async () => {
  stopTrickle?.();
  await server.close();
});

function pager(opts: Partial<PagedListOptions> = {}) {
  const { logger, lines } = recordingLogger();
  const list = makePagedList(kubeConfigFor(server.url), '/api/v1/services', {
    kind: 'Service',
    logger,
    ...opts,
  });
  return { list, lines };
}

async function refusal(p: Promise<unknown>): Promise<ListLimitError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ListLimitError);
  return err as ListLimitError;
}

describe('the list pager against a hostile API server', () => {
  it('stops a server that hands out a new continue token forever at maxPages', async () => {
    endlessContinue(server, 'services', 'new-token');
    const { list, lines } = pager({ maxPages: 5 });
    const err = await refusal(list());
    expect(err.code).toBe('ERR_LIST_LIMIT');
    expect(err.limit).toBe('pages');
    expect(server.count('list', 'services')).toBe(5);
    expect(list.stats()).toEqual({ lists: 0, limitExceeded: 1, deadlineExceeded: 0 });
    expect(lines.warn.some((l) => l.includes('still paging after 5 pages'))).toBe(true);
  });

  it('refuses a continue token it was given before, at once', async () => {
    endlessContinue(server, 'services', 'same-token');
    const { list, lines } = pager();
    const err = await refusal(list());
    expect(err.limit).toBe('repeated-continue');
    expect(server.count('list', 'services')).toBe(2);
    expect(lines.warn.some((l) => l.includes('repeated continue token "again"'))).toBe(true);
  });

  it('caps the items and the bytes of one list across its pages', async () => {
    endlessContinue(server, 'services', 'new-token');
    expect((await refusal(pager({ maxItems: 3 }).list())).limit).toBe('items');
    expect(server.count('list', 'services')).toBe(4);
    expect((await refusal(pager({ maxListBytes: 500 }).list())).limit).toBe('bytes');
  });

  it('still lists 2 000 objects in pages of 500 with the default limits', async () => {
    for (let i = 0; i < 2000; i++)
      server.store.create('services', service('ns', `s${i}`, '10.0.0.1'));
    const { list } = pager();
    expect((await list()).items).toHaveLength(2000);
    expect(server.count('list', 'services')).toBe(4);
    expect(list.stats().lists).toBe(1);
  });

  it('gives up on a body trickled a byte at a time at requestDeadlineMs, idle timeout or not', async () => {
    stopTrickle = trickleList(server, 'services', 5);
    const { list } = pager({ requestDeadlineMs: 300, requestTimeoutMs: 60_000 });
    const err = await refusal(list());
    expect(err.code).toBe('ERR_LIST_DEADLINE');
    expect(err.limit).toBe('deadline');
    expect(list.stats().deadlineExceeded).toBe(1);
  });

  it('escapes and cuts an API Status message', async () => {
    const message = `\x1b[2J\r\nfake log line ${'x'.repeat(5000)}`;
    server.intercept = (_r, _req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', message }));
      return true;
    };
    const err = (await pager()
      .list()
      .catch((e: unknown) => e)) as Error;
    expect(err.message).toContain('\\x1b[2J\\r\\nfake log line');
    expect(hasControlChars(err.message)).toBe(false);
    expect(err.message.length).toBeLessThan(1200);
  });
});
