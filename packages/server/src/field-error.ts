import { formatDuration } from './duration.js';

/**
 * One configuration error in Kubernetes' field.Error form, `<path>: <type>: <value>: <detail>`, so
 * that messages read exactly as kube-proxy's and scripts that grep for them keep working.
 */

/** The error types the daemon uses, spelled as Kubernetes prints them. */
export type FieldErrorType = 'Invalid value' | 'Unsupported value' | 'Required value' | 'Forbidden';

/** A value rendered the way Go's field errors render it: strings quoted, numbers bare, durations Go-style. */
export type RenderedValue = { readonly text: string };

/** A string value, quoted like Go's %q. */
export function str(value: string): RenderedValue {
  return { text: JSON.stringify(value) };
}

/** A number or boolean, printed bare. */
export function num(value: number | boolean): RenderedValue {
  return { text: String(value) };
}

/** A duration in milliseconds, printed as Go's time.Duration.String(). */
export function dur(ms: number): RenderedValue {
  return { text: formatDuration(ms) };
}

/** One error; `toString()` is the kube-proxy text. */
export class FieldError {
  constructor(
    /** "KubeProxyConfiguration.BindAddress", list items as "[i]". */
    readonly path: string,
    readonly type: FieldErrorType,
    /** Absent for Required and Forbidden, which print no value. */
    readonly value: RenderedValue | undefined,
    readonly detail: string,
  ) {}

  toString(): string {
    const value = this.value === undefined ? '' : `: ${this.value.text}`;
    const detail = this.detail === '' ? '' : `: ${this.detail}`;
    return `${this.path}: ${this.type}${value}${detail}`;
  }
}

/** field.Invalid. */
export function invalid(path: string, value: RenderedValue, detail: string): FieldError {
  return new FieldError(path, 'Invalid value', value, detail);
}

/** field.NotSupported: the detail lists the supported values, quoted, in the given order. */
export function unsupported(path: string, value: string, supported: readonly string[]): FieldError {
  const list = supported.map((s) => JSON.stringify(s)).join(', ');
  return new FieldError(path, 'Unsupported value', str(value), `supported values: ${list}`);
}

/** field.Required. */
export function required(path: string, detail: string): FieldError {
  return new FieldError(path, 'Required value', undefined, detail);
}

/** field.Forbidden. */
export function forbidden(path: string, detail: string): FieldError {
  return new FieldError(path, 'Forbidden', undefined, detail);
}

/**
 * Aggregates like Kubernetes' utilerrors.NewAggregate: one error bare, several as "[a, b]",
 * duplicates removed. The daemon prints one per line instead (see cli.ts); this form is for logs.
 */
export function aggregate(errors: readonly (FieldError | string)[]): string {
  const unique = [...new Set(errors.map(String))];
  return unique.length === 1 ? (unique[0] ?? '') : `[${unique.join(', ')}]`;
}
