/**
 * A small parser for the Prometheus text exposition format (version 0.0.4), so tests check what a
 * scraper would read rather than prom-client's internals.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  help: Map<string, string>;
  type: Map<string, string>;
  samples: Sample[];
}

function unescapeLabel(value: string): string {
  return value.replace(/\\(["\\n])/g, (_m, c: string) => (c === 'n' ? '\n' : c));
}

/** Parses `text`; throws on a line that is not valid exposition format. */
export function parseExposition(text: string): Exposition {
  const out: Exposition = { help: new Map(), type: new Map(), samples: [] };
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      (meta[1] === 'HELP' ? out.help : out.type).set(meta[2] as string, meta[3] as string);
      continue;
    }
    if (line.startsWith('#')) continue;
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (!sample) throw new Error(`not exposition format: ${line}`);
    const labels: Record<string, string> = {};
    for (const m of (sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g)) {
      labels[m[1] as string] = unescapeLabel(m[2] as string);
    }
    const raw = sample[3] as string;
    // Go's ParseFloat, which Prometheus uses, takes NaN and Inf in any case (prom-client writes "Nan").
    const special: Record<string, number> = {
      nan: Number.NaN,
      '+inf': Infinity,
      inf: Infinity,
      '-inf': -Infinity,
    };
    const value = special[raw.toLowerCase()] ?? Number(raw);
    if (Number.isNaN(value) && raw.toLowerCase() !== 'nan')
      throw new Error(`bad value in: ${line}`);
    out.samples.push({ name: sample[1] as string, labels, value });
  }
  return out;
}

/** The value of the one sample named `name` whose labels include `labels`; undefined when none. */
export function sampleValue(
  exposition: Exposition,
  name: string,
  labels: Record<string, string> = {},
): number | undefined {
  const match = exposition.samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
  if (match.length > 1)
    throw new Error(`${match.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return match[0]?.value;
}
