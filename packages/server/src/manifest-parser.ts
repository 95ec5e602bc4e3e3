import { type ManifestParseResult, parseManifest } from './manifest-parse.js';

/**
 * How the manifest source turns a file's text into validated objects. Parsing is CPU-bound and, for
 * a large or hostile file, long; on the thread that proxies it would stop every connection for as
 * long (issue 12: 13.8 s for a 4 MiB file), so the daemon's default runs it on a worker thread
 * (manifest-parser-worker.ts). {@link inlineManifestParser} parses on the calling thread, for
 * embedders and tests that do not need the isolation.
 */
export interface ManifestParser {
  /** Parses and validates; never rejects (every failure is an error in the result). */
  parse(text: string): Promise<ManifestParseResult>;
  /** Releases what the parser holds (its thread); `parse` may still be called afterwards. */
  close(): void;
}

/** Parses on the calling thread: simple and synchronous underneath, blocking while it runs. */
export const inlineManifestParser: ManifestParser = {
  parse: (text) => Promise.resolve(parseManifest(text)),
  close: () => {},
};
