import type { RefusedMessage } from '../diagnostics.js';
import { EndpointDialError, MissingEndpointsError, MissingServiceEntryError } from '../errors.js';

/**
 * True when the load balancer had nothing to offer (the Service port is unknown, or has no
 * endpoints): a routine refusal, logged at debug, unlike a dial that failed.
 */
export function isNoEndpointsError(error: unknown): boolean {
  return error instanceof MissingEndpointsError || error instanceof MissingServiceEntryError;
}

/**
 * The refusal reason every default socket counts a failed pick or dial under, so TCP, UDP and the
 * dialer classify one error the same way.
 */
export function refusalReason(error: unknown): RefusedMessage['reason'] {
  if (isNoEndpointsError(error)) return 'no-endpoints';
  return error instanceof EndpointDialError ? 'dial-failed' : 'other';
}
