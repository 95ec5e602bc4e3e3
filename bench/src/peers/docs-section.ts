/**
 * The generated part of docs/benchmarks.md lives between two marker comments, so a later
 * `--peers --write` replaces exactly its own figures and leaves the prose around them (and the other
 * generated blocks, `suite:` and `k8s-scale:`) alone.
 */

/** Where the peers block starts in docs/benchmarks.md. */
export const PEERS_START = '<!-- peers:start -->';
/** Where it ends. */
export const PEERS_END = '<!-- peers:end -->';

/** The markers are there but broken: writing would lose text, so nothing is written. */
export class SectionMarkersError extends Error {
  /** Stable for callers that want to tell this from an I/O error. */
  readonly code = 'ERR_BENCH_SECTION_MARKERS';

  constructor(reason: string) {
    super(`docs/benchmarks.md: ${reason}; fix the markers by hand, nothing was written`);
    this.name = 'SectionMarkersError';
  }
}

/**
 * `text` with the block between `start` and `end` (markers included) replaced by `block`; without
 * markers, the block is appended under `heading`. A start without an end, an end before the start,
 * or a marker twice is refused rather than guessed at.
 */
export function replaceSection(
  text: string,
  block: string,
  heading: string,
  start = PEERS_START,
  end = PEERS_END,
): string {
  const wrapped = `${start}\n${block.trim()}\n${end}`;
  const i = text.indexOf(start);
  const j = text.indexOf(end);
  if (i < 0 && j < 0) return `${text.trimEnd()}\n\n${heading}\n\n${wrapped}\n`;
  if (i < 0 || j < 0) throw new SectionMarkersError(`only one of ${start} and ${end} is there`);
  if (j < i) throw new SectionMarkersError(`${end} comes before ${start}`);
  if (text.indexOf(start, i + 1) >= 0 || text.indexOf(end, j + 1) >= 0) {
    throw new SectionMarkersError('a marker appears twice');
  }
  return text.slice(0, i) + wrapped + text.slice(j + end.length);
}
