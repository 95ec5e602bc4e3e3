import type { watch as fsWatch } from 'node:fs';
import { resolve } from 'node:path';
import {
  componentLogger,
  type EndpointSlice,
  type Endpoints,
  type Logger,
  type Service,
  StaticInformer,
} from '@userspace-proxy/core';
import { readBoundedFile } from './bounded-read.js';
import { watchFile } from './file-watch.js';
import {
  MAX_MANIFEST_BYTES,
  MAX_MANIFEST_ERRORS,
  type ManifestContents,
  tooLargeMessage,
} from './manifest-parse.js';
import type { ManifestParser } from './manifest-parser.js';
import { WorkerManifestParser } from './manifest-parser-worker.js';
import type { ProxySources } from './sources.js';

/**
 * The manifest-file source: Services with their EndpointSlices or Endpoints from a file, served
 * without a cluster. The file is watched; an edit is applied live through StaticInformer.replace,
 * which turns the new file into the adds, updates and deletes that differ, so unchanged Services
 * keep their listeners and established connections. An edit that does not parse or validate is
 * logged with every reason and ignored: the last good state keeps serving until the file is fixed.
 *
 * A file with no content (zero bytes, or only white space, comments and document markers) is "not
 * written yet", never "no Services": an editor or a script that truncates the file and then writes
 * it shows exactly that between its two steps, and applying it would close every listener and cut
 * every connection. Such a read keeps the current state, is reported once (a warning and
 * `onReload`), and is read again after the settle delay; removing every Service takes an explicit
 * empty list (`[]`, or a `List` with `items: []`).
 */

/** Thrown when the file is unusable at start, where there is no last good state to keep. */
export class ManifestError extends Error {
  readonly reasons: readonly string[];
  constructor(path: string, reasons: readonly string[]) {
    super(`invalid services file ${path}:\n  ${reasons.join('\n  ')}`);
    this.name = 'ManifestError';
    this.reasons = reasons;
  }
}

/** The outcome of one (re)load. */
export interface ReloadOutcome {
  /** True when the file was applied (or was unchanged). */
  applied: boolean;
  /**
   * True when the text was the same as the last one read (or the file is still without content):
   * nothing was done.
   */
  unchanged: boolean;
  /**
   * True when the file had no content (see {@link isBlankManifest}): not applied, the current
   * state kept, as a truncating write in progress looks exactly like this.
   */
  empty?: boolean;
  errors: readonly string[];
  warnings: readonly string[];
  /** Informer events the reload caused (0 when nothing differed, or before `run`). */
  events: number;
  /** What the file holds, when it was valid. */
  counts?: { services: number; endpointSlices: number; endpoints: number };
}

/** Options of {@link ManifestSource}. */
export interface ManifestSourceOptions {
  path: string;
  logger?: Logger;
  /** Wait after a change notice before reading: editors write in steps. Default 100. */
  debounceMs?: number;
  /** After the directory watch fails (the directory was removed), retry it this often. Default 1000. */
  rewatchMs?: number;
  /** Default a bounded read as UTF-8: a regular file of at most {@link MAX_MANIFEST_BYTES}. */
  read?: (path: string) => Promise<string>;
  /** Default node:fs `watch`; a fake in tests. */
  watch?: typeof fsWatch;
  /**
   * Told about every reload after the first that changed something or found a new mistake (the
   * daemon counts them); the same rejected file seen again is not reported again.
   */
  onReload?: (outcome: ReloadOutcome) => void;
  /** Default a {@link WorkerManifestParser}: parsing never blocks the proxy's event loop. */
  parser?: ManifestParser;
}

/**
 * Reads a manifest, refusing one that is not a regular file (a FIFO would hang the read, /dev/zero
 * would fill the heap) or is larger than {@link MAX_MANIFEST_BYTES}, before reading it.
 */
function readLimited(path: string): Promise<string> {
  return readBoundedFile(path, { maxBytes: MAX_MANIFEST_BYTES, tooLarge: tooLargeMessage });
}

/** A YAML line that holds nothing: blank, a comment, or a document marker (`---`, `...`). */
const NOTHING_LINE = /^\s*(?:#.*|(?:---|\.\.\.)(?:\s+#.*)?)?\s*$/;

/**
 * True when a manifest's text has no content at all: zero bytes, or only white space, comments and
 * `---`/`...` markers (what a file being rewritten in place, or a template with everything commented
 * out, holds). The source treats such a file as not written yet; an explicit `[]` or `items: []`
 * is content, and means no Services.
 */
export function isBlankManifest(text: string): boolean {
  const body = text.startsWith('\uFEFF') ? text.slice(1) : text;
  return body.split(/\r?\n/).every((line) => NOTHING_LINE.test(line));
}

/** The warnings of one reload as one message (one mistake, one line). */
export function warningsMessage(path: string, warnings: readonly string[]): string {
  return `${path}: ${warnings.join('; ')}`;
}

/** A {@link ProxySources} backed by a watched manifest file. */
export class ManifestSource implements ProxySources {
  readonly services = new StaticInformer<Service>({ synced: false, kind: 'Service' });
  readonly endpointSlices = new StaticInformer<EndpointSlice>({
    synced: false,
    kind: 'EndpointSlice',
  });
  readonly endpoints = new StaticInformer<Endpoints>({ synced: false, kind: 'Endpoints' });
  readonly #path: string;
  readonly #options: ManifestSourceOptions;
  readonly #log: Logger;
  readonly #parser: ManifestParser;
  #lastText: string | undefined;
  /** The last text refused, so that the same mistake is neither parsed nor reported twice. */
  #rejectedText: string | undefined;
  /** The errors last reported, for the same reason (a file that cannot be read, again and again). */
  #reported: string | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  /** True while the file reads as blank: a second blank read in a row is not reported again. */
  #blank = false;
  /** The one re-read scheduled after a blank read. */
  #reread: ReturnType<typeof setTimeout> | undefined;
  /** Services last delivered or loaded, for the blank file's warning. */
  #serviceCount = 0;
  /** Contents loaded before `run`: held back until the daemon has registered every handler. */
  #initial: ManifestContents | undefined;
  #started = false;

  constructor(options: ManifestSourceOptions) {
    this.#path = resolve(options.path);
    this.#options = options;
    this.#log = componentLogger(options.logger, 'services-file');
    this.#parser = options.parser ?? new WorkerManifestParser();
  }

  /** The absolute path of the file. */
  get path(): string {
    return this.#path;
  }

  /** Ends the parser's thread (the daemon's stop does this through `run`'s signal). */
  close(): void {
    this.#parser.close();
  }

  /** Reads the file and applies it if it is valid. Reloads run one at a time, in call order. */
  load(): Promise<ReloadOutcome> {
    const next = this.#queue.then(() => this.#load());
    this.#queue = next.catch(() => undefined);
    return next;
  }

  async #load(): Promise<ReloadOutcome> {
    let text: string;
    try {
      text = await (this.#options.read ?? readLimited)(this.#path);
    } catch (err) {
      const reason = `cannot read ${this.#path}: ${(err as Error).message}`;
      return { applied: false, unchanged: false, errors: [reason], warnings: [], events: 0 };
    }
    if (isBlankManifest(text)) {
      const unchanged = this.#blank;
      this.#blank = true;
      return { applied: false, unchanged, empty: true, errors: [], warnings: [], events: 0 };
    }
    const wasBlank = this.#blank;
    this.#blank = false;
    if (text === this.#lastText) {
      // After a blank read, the same text back (a truncate-then-write of an unchanged file) is
      // reported as applied with no change, so the log says the file is whole again.
      return { applied: true, unchanged: !wasBlank, errors: [], warnings: [], events: 0 };
    }
    if (text === this.#rejectedText) {
      return { applied: false, unchanged: true, errors: [], warnings: [], events: 0 };
    }
    const parsed = await this.#parser.parse(text);
    if (!parsed.ok) {
      this.#rejectedText = text;
      return {
        applied: false,
        unchanged: false,
        errors: parsed.errors,
        warnings: parsed.warnings,
        events: 0,
      };
    }
    this.#lastText = text;
    this.#rejectedText = undefined;
    const { services, endpointSlices, endpoints } = parsed.contents;
    const counts = {
      services: services.length,
      endpointSlices: endpointSlices.length,
      endpoints: endpoints.length,
    };
    this.#serviceCount = services.length;
    let events = 0;
    if (this.#started) events = this.#apply(parsed.contents);
    else this.#initial = parsed.contents;
    return {
      applied: true,
      unchanged: false,
      errors: [],
      warnings: parsed.warnings,
      events,
      counts,
    };
  }

  /** Endpoints first, so a new Service's endpoints are known when its listener opens. */
  #apply(contents: ManifestContents): number {
    return (
      this.endpointSlices.replace(contents.endpointSlices) +
      this.endpoints.replace(contents.endpoints) +
      this.services.replace(contents.services)
    );
  }

  /**
   * Delivers the contents loaded so far (the informers turn synced), then watches the file (see
   * file-watch.ts) and applies each valid edit, until `signal` aborts. Nothing reaches the informers
   * before this is called, so handlers registered on config fan-outs in the meantime miss nothing.
   */
  async run(signal: AbortSignal): Promise<void> {
    if (!this.#started) {
      this.#started = true;
      this.#apply(this.#initial ?? { services: [], endpointSlices: [], endpoints: [] });
      this.#initial = undefined;
    }
    this.#log.info(`watching ${this.#path} for changes`);
    signal.addEventListener(
      'abort',
      () => {
        this.#parser.close();
        if (this.#reread !== undefined) clearTimeout(this.#reread);
        this.#reread = undefined;
      },
      { once: true },
    );
    const reload = () => {
      void this.load().then((outcome) => {
        if (!signal.aborted) this.#report(outcome);
      });
    };
    this.#rereadBlank = () => {
      if (this.#reread !== undefined || signal.aborted) return;
      this.#reread = setTimeout(() => {
        this.#reread = undefined;
        reload();
      }, this.#options.debounceMs ?? 100);
      this.#reread.unref?.();
    };
    await watchFile(
      {
        path: this.#path,
        logger: this.#log,
        onChange: reload,
        ...(this.#options.debounceMs !== undefined ? { debounceMs: this.#options.debounceMs } : {}),
        ...(this.#options.rewatchMs !== undefined ? { rewatchMs: this.#options.rewatchMs } : {}),
        ...(this.#options.watch ? { watch: this.#options.watch } : {}),
      },
      signal,
    );
  }

  /** Schedules one re-read after the settle delay (set by `run`). */
  #rereadBlank: () => void = () => {};

  /** One message per reload: the errors, or the warnings and the result; a repeat says nothing. */
  #report(outcome: ReloadOutcome): void {
    if (outcome.unchanged) return;
    if (outcome.empty) {
      this.#reported = undefined;
      this.#log.warn(blankMessage(this.#path, this.#serviceCount));
      // A truncate-then-write whose second step raised no further notice is still picked up.
      this.#rereadBlank();
    } else if (outcome.applied) {
      this.#reported = undefined;
      if (outcome.warnings.length > 0)
        this.#log.warn(warningsMessage(this.#path, outcome.warnings));
      this.#log.info(`applied ${this.#path}: ${outcome.events} change(s)`);
    } else {
      const shown = outcome.errors.slice(0, MAX_MANIFEST_ERRORS).join('; ');
      if (shown === this.#reported) return; // the same file still cannot be read
      this.#reported = shown;
      this.#log.error(
        `ignoring the edit of ${this.#path}, the last good state keeps serving: ${shown}`,
      );
    }
    try {
      this.#options.onReload?.(outcome);
    } catch (err) {
      this.#log.error('a reload observer threw', err);
    }
  }
}

/** The warning for a file without content, saying what is kept and how to remove every Service. */
function blankMessage(path: string, kept: number): string {
  return (
    `${path} has no content (a write in progress?): keeping the current ${kept} Service(s) and ` +
    'reading it again; to remove every Service write an empty list, [] (or a List with items: [])'
  );
}

/**
 * Creates the source and reads the file once, so an invalid file stops the daemon at start; its
 * objects are delivered when `run` is called. A file without content starts the daemon with no
 * Services (there is nothing to keep), with a warning.
 * @throws ManifestError when the file cannot be read or is invalid.
 */
export async function createManifestSource(
  options: ManifestSourceOptions,
): Promise<ManifestSource> {
  const source = new ManifestSource(options);
  const outcome = await source.load();
  const log = componentLogger(options.logger, 'services-file');
  if (outcome.empty) {
    log.warn(
      `${source.path} has no content: starting with no Services; a Service written to it later is ` +
        'applied (an empty list, [], says "no Services" without this warning)',
    );
    return source;
  }
  if (!outcome.applied) {
    source.close();
    throw new ManifestError(source.path, outcome.errors);
  }
  if (outcome.warnings.length > 0) log.warn(warningsMessage(source.path, outcome.warnings));
  const counts = outcome.counts;
  log.info(
    `loaded ${source.path}: ${counts?.services} Service(s), ` +
      `${counts?.endpointSlices} EndpointSlice(s), ${counts?.endpoints} Endpoints`,
  );
  return source;
}
