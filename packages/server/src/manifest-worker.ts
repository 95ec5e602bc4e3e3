import { parentPort } from 'node:worker_threads';
import { parseManifest } from './manifest-parse.js';

/**
 * The worker thread of WorkerManifestParser: parses each text it is sent and posts the result back,
 * with the request's id. It holds no state between requests.
 */

/** A request to the worker. */
export interface ParseRequest {
  id: number;
  text: string;
}

parentPort?.on('message', (request: ParseRequest) => {
  let result: ReturnType<typeof parseManifest>;
  try {
    result = parseManifest(request.text);
  } catch (err) {
    // parseManifest does not throw; a stack overflow in a validator is the one way it could
    result = { ok: false, errors: [`cannot parse: ${(err as Error).message}`], warnings: [] };
  }
  parentPort?.postMessage({ id: request.id, result });
});
