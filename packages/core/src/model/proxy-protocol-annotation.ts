import type { Service } from './model.js';

/**
 * The annotation that turns the PROXY protocol on for a Service's TCP ports: `v1` (the text line) or
 * `v2` (the binary header). Absent, nothing is sent. Validation refuses any other value, with the
 * field path, so a typo never silently serves backends without the header they parse (or with one
 * they do not).
 */
export const PROXY_PROTOCOL_ANNOTATION = 'userspace-proxy.io/proxy-protocol';

/** A PROXY protocol version the proxy writes towards endpoints. */
export type ProxyProtocolVersion = 'v1' | 'v2';

/** The accepted values of {@link PROXY_PROTOCOL_ANNOTATION}. */
export const PROXY_PROTOCOL_VERSIONS: readonly ProxyProtocolVersion[] = ['v1', 'v2'];

/**
 * The PROXY protocol version a Service asks for: undefined when the annotation is absent, the
 * version when it is valid, `{ invalid }` with the raw value otherwise (a Service that was not
 * validated, e.g. a hand-made socket context). Never throws.
 */
export function proxyProtocolOf(
  service: Service | undefined,
): ProxyProtocolVersion | { invalid: unknown } | undefined {
  let value: unknown;
  try {
    value = service?.metadata?.annotations?.[PROXY_PROTOCOL_ANNOTATION];
  } catch {
    return { invalid: 'an unreadable value' };
  }
  if (value === undefined) return undefined;
  return value === 'v1' || value === 'v2' ? value : { invalid: value };
}
