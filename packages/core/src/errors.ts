/**
 * Every error a user can act on is a class here with a stable `code`. Codes never change once
 * released; messages may. `instanceof` works across duplicate copies of the package within one copy of
 * the package; across duplicate copies use `ProxyError.isProxyError`, which checks a `Symbol.for`
 * brand, as undici does.
 */

const kProxyError = Symbol.for('userspace-proxy.error');

/** The base of every error the project throws or reports on purpose. */
export class ProxyError extends Error {
  /** A stable, machine-readable identifier such as `ERR_MISSING_ENDPOINTS`. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }

  /** True for any ProxyError, even one made by another copy of this package. */
  static isProxyError(value: unknown): value is ProxyError {
    return typeof value === 'object' && value !== null && kProxyError in value;
  }

  /** The brand {@link ProxyError.isProxyError} checks. */
  get [kProxyError](): true {
    return true;
  }
}

/** The load balancer has no entry for the Service port: the Service is unknown or was deleted. */
export class MissingServiceEntryError extends ProxyError {
  constructor(service: string) {
    super('ERR_MISSING_SERVICE_ENTRY', `missing service entry for ${service}`);
  }
}

/** The Service port is known but has no ready endpoint; new clients are refused until one appears. */
export class MissingEndpointsError extends ProxyError {
  constructor(service: string) {
    super('ERR_MISSING_ENDPOINTS', `missing endpoints for ${service}`);
  }
}

/** A client address could not be parsed for ClientIP affinity. */
export class MalformedSourceAddressError extends ProxyError {
  constructor(address: string) {
    super('ERR_MALFORMED_SOURCE_ADDRESS', `malformed source address "${address}"`);
  }
}

/** Every attempt to reach an endpoint failed; the client connection is closed. */
export class EndpointDialError extends ProxyError {
  constructor(service: string, attempts: number, options?: { cause?: unknown }) {
    super(
      'ERR_CONNECT_ENDPOINT',
      `failed to connect to an endpoint of ${service} after ${attempts} attempt(s)`,
      options,
    );
  }
}

/** A port range string could not be parsed. */
export class InvalidPortRangeError extends ProxyError {
  constructor(value: string, reason: string) {
    super('ERR_INVALID_PORT_RANGE', `invalid port range "${value}": ${reason}`);
  }
}

/** A port range is exhausted; widen `portRange` or remove Services. */
export class PortAllocationError extends ProxyError {
  constructor(range: string) {
    super(
      'ERR_PORT_ALLOCATION',
      `port allocation failed; there are no remaining ports left to allocate in the range ${range}`,
    );
  }
}

/** Two Service ports claim the same address, port and protocol. The later claim is refused. */
export class PortConflictError extends ProxyError {
  constructor(key: string, owner: string, existingOwner: string) {
    super(
      'ERR_PORT_CONFLICT',
      `port conflict detected on port ${key}: ${owner} vs ${existingOwner}; change one Service's port`,
    );
  }
}

/** The proxy socket factory was asked for a protocol it does not implement. */
export class UnsupportedProtocolError extends ProxyError {
  constructor(protocol: string) {
    super(
      'ERR_UNSUPPORTED_PROTOCOL',
      protocol === 'SCTP'
        ? 'SCTP is not supported by the default proxy socket factory; pass one from @userspace-proxy/sctp'
        : `unknown protocol "${protocol}"`,
    );
  }
}

/** A socket (proxy socket, node-port claim, portal listener) could not be opened. */
export class SocketOpenError extends ProxyError {
  constructor(what: string, options?: { cause?: unknown }) {
    const reason = options?.cause instanceof Error ? `: ${options.cause.message}` : '';
    super('ERR_SOCKET_OPEN', `can't open ${what}${reason}`, options);
  }
}

/** The redirect mode was asked to listen on loopback, where redirected traffic cannot arrive. */
export class ProxyOnLocalhostError extends ProxyError {
  constructor(ip: string) {
    super('ERR_PROXY_ON_LOCALHOST', `cannot proxy on localhost (${ip}) in redirect mode`);
  }
}

/** An object from a source (Service, Endpoints, EndpointSlice) was malformed and was ignored. */
export class InvalidObjectError extends ProxyError {
  /** "Service", "Endpoints" or "EndpointSlice". */
  readonly kind: string;
  /** "ns/name" of the object, or a placeholder when it has no usable name. */
  readonly key: string;
  /** What is wrong, without the kind and key: what the `objectRejected` channel publishes. */
  readonly reason: string;
  constructor(kind: string, key: string, reason: string) {
    super('ERR_INVALID_OBJECT', `ignoring ${kind} ${key}: ${reason}`);
    this.kind = kind;
    this.key = key;
    this.reason = reason;
  }
}

/** An option passed to a constructor is invalid. */
export class InvalidOptionError extends ProxyError {
  constructor(option: string, reason: string) {
    super('ERR_INVALID_OPTION', `invalid option ${option}: ${reason}`);
  }
}

/** Conntrack entries could not be removed; stale UDP flows may reach old endpoints. */
export class ConntrackError extends ProxyError {
  /** `hint`, when given, is appended to the message: what the operator should do (install conntrack). */
  constructor(ip: string, options?: { cause?: unknown; hint?: string }) {
    super(
      'ERR_CONNTRACK',
      `error deleting connection tracking state for UDP service IP ${ip}${options?.hint ? `: ${options.hint}` : ''}`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
  }
}

/** A portal (capture rule or listener for one Service address) could not be opened or closed. */
export class PortalError extends ProxyError {
  constructor(portal: string, action: 'open' | 'close', options?: { cause?: unknown }) {
    const reason = options?.cause instanceof Error ? `: ${options.cause.message}` : '';
    super('ERR_PORTAL', `failed to ${action} portal ${portal}${reason}`, options);
  }
}

/** A configured limit (connections, UDP sessions, held connections) refused new work. */
export class LimitReachedError extends ProxyError {
  constructor(what: string, limit: number) {
    super('ERR_LIMIT_REACHED', `${what} limit of ${limit} reached`);
  }
}

/**
 * A handler changed an object it was given by a config fan-out. Objects are shared with the informer's
 * cache and with every other handler, so a mutation corrupts what everyone else sees; it is reported
 * (never tolerated) when mutation detection is on. Copy an object before changing it.
 */
export class CacheMutationError extends ProxyError {
  /** The kind of the mutated object. */
  readonly kind: string;
  /** "ns/name" of the mutated object. */
  readonly key: string;
  /** The first field found changed, e.g. `spec.ports[0].port`, or "" for the object itself. */
  readonly path: string;
  constructor(kind: string, key: string, path: string) {
    super(
      'ERR_CACHE_MUTATION',
      `a handler mutated the cached ${kind} ${key}${path === '' ? '' : ` at ${path}`}; copy objects before changing them`,
    );
    this.kind = kind;
    this.key = key;
    this.path = path;
  }
}
