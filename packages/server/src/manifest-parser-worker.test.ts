import { describe, expect, it } from 'vitest';
import { WorkerManifestParser } from './manifest-parser-worker.js';

const service =
  'kind: Service\nmetadata: { name: a }\nspec: { clusterIP: 127.1.75.1, ports: [{ port: 80 }] }\n';

describe('WorkerManifestParser', () => {
  it('parses on a worker thread and keeps it for the next parse', async () => {
    const parser = new WorkerManifestParser();
    try {
      const first = await parser.parse(service);
      expect(first.ok && first.contents.services.map((s) => s.metadata.name)).toEqual(['a']);
      const second = await parser.parse('kind: Service\nmetadata: {}\n');
      expect(second.ok).toBe(false);
    } finally {
      parser.close();
    }
  });

  it('refuses a parse over its time limit, then starts a new thread', async () => {
    const parser = new WorkerManifestParser({ timeoutMs: 5 });
    try {
      const slow = Array.from({ length: 2000 }, () => service).join('---\n');
      expect(await parser.parse(slow)).toEqual({
        ok: false,
        errors: ['parsing took longer than the limit of 5ms; the file was not applied'],
        warnings: [],
      });
    } finally {
      parser.close();
    }
    const patient = new WorkerManifestParser();
    try {
      expect((await patient.parse(service)).ok).toBe(true);
    } finally {
      patient.close();
    }
  });

  it('reports a thread that cannot start as an error, not an exception', async () => {
    const parser = new WorkerManifestParser({
      startWorker: () => {
        throw new Error('no threads here');
      },
    });
    expect(await parser.parse(service)).toMatchObject({
      ok: false,
      errors: ['cannot start the parser thread: no threads here'],
    });
  });
});
