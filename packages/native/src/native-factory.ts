/**
 * {@link withNativeTcp}: the factory that serves TCP through one native helper process and hands
 * every other protocol to the factory it wraps.
 */
import {
  type AcceptPolicyFactory,
  createProxySocketFactory,
  DEFAULT_PROXY_SOCKET_OPTIONS,
  type ProxySocket,
  type ProxySocketContext,
  type ProxySocketFactory,
  type ProxySocketOptions,
  SocketOpenError,
} from '@userspace-proxy/core';
import { type NativeTcpCounters, NativeTcpEngine } from './engine.js';
import { NativeUnsupportedError } from './errors.js';
import { checkContext, countOption as count, startOptions } from './helper-process.js';
import type { SocketSettings } from './native-connection.js';
import { NativeTcpProxySocket } from './proxy-socket-native.js';
import type { RelayHelperOptions } from './relay-protocol.js';

/** Options of {@link withNativeTcp}. */
export interface NativeTcpOptions extends ProxySocketOptions, RelayHelperOptions {
  /**
   * Connections one helper (one factory) carries at once, over all its sockets; further clients
   * are reset at accept and counted as `connection-limit` refusals. Default 16 384 (a relayed
   * connection holds up to six descriptors: two sockets, two pipes).
   */
  readonly maxHelperConnections?: number;
  /** listen(2) backlog of each listening socket (one per helper thread). Default 511, as Node's. */
  readonly backlog?: number;
  /** First delay before a dead helper is restarted, ms; doubles up to 5 s. Default 100. */
  readonly restartBackoffMs?: number;
  /**
   * Core's accept policy of every TCP socket (proxy now, hold, or refuse per connection), with core's
   * semantics: the verdict runs in Node on each accept; a held client is read by the helper into a
   * buffer of at most `holdBufferBytes` and written to the endpoint first after `proxy()`. Default:
   * every connection is proxied at once (and the fast path of picks made ahead may apply).
   */
  readonly acceptPolicy?: AcceptPolicyFactory;
}

/** What {@link withNativeTcp} returns: a factory, plus its helper's counters and shutdown. */
export interface NativeTcpFactory extends ProxySocketFactory {
  /** Counters of the factory's helper (restarts, accepts, refusals at the helper's cap). */
  readonly counters: NativeTcpCounters;
  /** The running helper's process id, undefined when none runs (it starts with the first socket). */
  helperPid(): number | undefined;
  /** Stops the helper (every connection it carries ends); later TCP sockets fail to open. */
  close(): Promise<void>;
  /**
   * A factory whose TCP sockets use `acceptPolicy` (none: every connection proxied) and share this
   * factory's helper, its options and its `maxHelperConnections` (held clients count): an idling
   * proxier's sockets beside the main proxier's, one helper for both.
   */
  withAcceptPolicy(acceptPolicy: AcceptPolicyFactory | undefined): ProxySocketFactory;
}

/**
 * Serves TCP through the native helper and everything else through `base`: one helper process per
 * call, shared by its sockets, started with the first TCP socket and stopped when none is left.
 * The options are core's socket options (dial schedule, per-socket `maxConnections`, keep-alive,
 * idle and half-close timeouts) plus the helper's; see docs/native.md.
 * @throws InvalidOptionError at once for a bad option.
 */
export function withNativeTcp(
  base: ProxySocketFactory,
  options: NativeTcpOptions = {},
): NativeTcpFactory {
  // Core's validation of its own options (throws InvalidOptionError naming the option).
  createProxySocketFactory(options as ProxySocketOptions);
  const opts = { ...DEFAULT_PROXY_SOCKET_OPTIONS } as SocketSettings;
  for (const key of Object.keys(DEFAULT_PROXY_SOCKET_OPTIONS) as (keyof ProxySocketOptions)[]) {
    if (options[key] !== undefined) (opts as Record<string, unknown>)[key] = options[key];
  }
  const maxHelperConnections = count(
    'maxHelperConnections',
    options.maxHelperConnections,
    16_384,
    1,
  );
  const backlog = count('backlog', options.backlog, 511, 1);
  const restartBackoffMs = count('restartBackoffMs', options.restartBackoffMs, 100, 1);
  if (options.threads !== undefined) count('threads', options.threads, 0, 0);
  const engine = new NativeTcpEngine({
    ...startOptions(options),
    restartBackoffMs,
    dialTimeoutsMs: opts.dialTimeoutsMs,
    limits: {
      maxConnections: maxHelperConnections,
      keepAliveMs: opts.keepAliveMs,
      idleTimeoutMs: opts.idleTimeoutMs,
      halfCloseTimeoutMs: opts.halfCloseTimeoutMs,
    },
  });
  const make =
    (acceptPolicy: AcceptPolicyFactory | undefined) =>
    async (ctx: ProxySocketContext): Promise<ProxySocket> => {
      if (String(ctx.protocol).toUpperCase() !== 'TCP') return base(ctx);
      const what = checkContext(ctx, 'TCP');
      try {
        return await NativeTcpProxySocket.open(ctx, engine, opts, backlog, acceptPolicy);
      } catch (error) {
        if (error instanceof NativeUnsupportedError) throw error;
        throw new SocketOpenError(what, { cause: error });
      }
    };
  return Object.assign(make(options.acceptPolicy), {
    counters: engine.counters,
    helperPid: () => engine.helperPid,
    close: () => engine.close(),
    withAcceptPolicy: make,
  });
}
