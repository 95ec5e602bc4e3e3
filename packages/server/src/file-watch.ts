import { watch as fsWatch } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from '@userspace-proxy/core';

/**
 * Watching one file for edits. The directory is watched, not the file: editors save by writing a new
 * file and renaming it over the old one, and Kubernetes updates ConfigMap volumes by swapping a
 * symlinked directory, and both leave a watch on the old file's inode blind. Any event in the
 * directory schedules one debounced callback; the caller compares contents to skip no-ops.
 */

/** Options of {@link watchFile}. */
export interface WatchFileOptions {
  path: string;
  /** Called (debounced) after something in the file's directory changed. */
  onChange: () => void;
  logger: Logger;
  /** Wait after a change notice before calling back: editors write in steps. Default 100. */
  debounceMs?: number;
  /** After the watch fails (the directory was removed), retry this often. Default 1000. */
  rewatchMs?: number;
  /** Default node:fs `watch`; a fake in tests. */
  watch?: typeof fsWatch;
}

/**
 * Watches until `signal` aborts, then resolves. Also calls back once right after the watch is in
 * place, so a change made between the caller's first read and the watch is not missed.
 */
export async function watchFile(options: WatchFileOptions, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return;
  const watch = options.watch ?? fsWatch;
  const debounceMs = options.debounceMs ?? 100;
  const rewatchMs = options.rewatchMs ?? 1000;
  const dir = dirname(options.path);
  const log = options.logger;
  let debounce: ReturnType<typeof setTimeout> | undefined;
  let rewatch: ReturnType<typeof setTimeout> | undefined;
  let watcher: ReturnType<typeof fsWatch> | undefined;
  const schedule = () => {
    if (debounce !== undefined) clearTimeout(debounce);
    debounce = setTimeout(() => {
      debounce = undefined;
      if (signal.aborted) return;
      try {
        options.onChange();
      } catch (err) {
        log.error(`handling a change of ${options.path} failed`, err);
      }
    }, debounceMs);
  };
  const retry = (why: string) => {
    log.error(`${why}; retrying in ${rewatchMs} ms`);
    watcher?.close();
    watcher = undefined;
    rewatch = setTimeout(start, rewatchMs);
  };
  function start() {
    rewatch = undefined;
    if (signal.aborted) return;
    try {
      watcher = watch(dir, { persistent: false }, () => schedule());
      watcher.on('error', (err) => retry(`watching ${dir} failed: ${err.message}`));
      schedule();
    } catch (err) {
      retry(`cannot watch ${dir}: ${(err as Error).message}`);
    }
  }
  start();
  await new Promise<void>((done) => signal.addEventListener('abort', () => done(), { once: true }));
  if (debounce !== undefined) clearTimeout(debounce);
  if (rewatch !== undefined) clearTimeout(rewatch);
  watcher?.close();
}
