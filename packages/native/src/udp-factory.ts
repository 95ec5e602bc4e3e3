/**
 * {@link withNativeUdp}: the factory that serves UDP through one native helper process and hands
 * every other protocol to the factory it wraps (so `withNativeUdp(withNativeTcp(base))` serves
 * both natively, each protocol with a helper of its own).
 */
import {
  createProxySocketFactory,
  DEFAULT_PROXY_SOCKET_OPTIONS,
  type ProxySocket,
  type ProxySocketContext,
  type ProxySocketFactory,
  type ProxySocketOptions,
  SocketOpenError,
} from '@userspace-proxy/core';
import { NativeUnsupportedError } from './errors.js';
import { checkContext, countOption, startOptions } from './helper-process.js';
import { type NativeUdpCounters, NativeUdpEngine } from './udp-engine.js';
import type { UdpHelperOptions } from './udp-protocol.js';
import { NativeUdpProxySocket } from './udp-proxy-socket.js';

/** The Service socket's receive buffer when `udpBufferBytes` is 0: core's default (4 MiB). */
const DEFAULT_SERVICE_BUFFER_BYTES = 4 * 1024 * 1024;

/** Options of {@link withNativeUdp}. */
export interface NativeUdpOptions extends UdpHelperOptions {
  /** Sessions one socket holds at once, over every helper thread. Default 4 096, as core's. */
  readonly maxUdpSessions?: number;
  /**
   * Sessions one client address holds on one socket. Default 0: a quarter of `maxUdpSessions`,
   * rounded up, as core's.
   */
  readonly maxUdpSessionsPerSource?: number;
  /**
   * Receive and send buffer of every UDP socket (each helper thread's Service socket, each
   * session's upstream socket), bytes, as core's option. Default 0: the Service sockets ask for
   * core's 4 MiB (the kernel caps it at net.core.rmem_max), session sockets keep the OS default.
   */
  readonly udpBufferBytes?: number;
  /** First delay before a dead helper is restarted, ms; doubles up to 5 s. Default 100. */
  readonly restartBackoffMs?: number;
  /**
   * Not supported: core's `createSocket` injection makes Node sockets, and the helper's are its
   * own. Given, every UDP socket of the factory fails to open with ERR_NATIVE_UNSUPPORTED.
   */
  readonly createSocket?: unknown;
}

/** What {@link withNativeUdp} returns: a factory, plus its helper's counters and shutdown. */
export interface NativeUdpFactory extends ProxySocketFactory {
  /** Counters of the factory's helper (restarts, sessions opened ahead or asked, drops). */
  readonly counters: NativeUdpCounters;
  /** The running helper's process id, undefined when none runs (it starts with the first socket). */
  helperPid(): number | undefined;
  /** Stops the helper (every session it carries ends); later UDP sockets fail to open. */
  close(): Promise<void>;
}

/**
 * Serves UDP through the native helper and everything else through `base`: one helper process per
 * call, shared by its UDP sockets, started with the first and stopped when none is left. The
 * options are core's UDP socket options plus the helper's; see docs/native.md.
 * @throws InvalidOptionError at once for a bad option.
 */
export function withNativeUdp(
  base: ProxySocketFactory,
  options: NativeUdpOptions = {},
): NativeUdpFactory {
  const core: ProxySocketOptions = {};
  if (options.maxUdpSessions !== undefined) core.maxUdpSessions = options.maxUdpSessions;
  if (options.maxUdpSessionsPerSource !== undefined)
    core.maxUdpSessionsPerSource = options.maxUdpSessionsPerSource;
  if (options.udpBufferBytes !== undefined) core.udpBufferBytes = options.udpBufferBytes;
  // Core's validation of its own options (throws InvalidOptionError naming the option).
  createProxySocketFactory(core);
  const maxUdpSessions = options.maxUdpSessions ?? DEFAULT_PROXY_SOCKET_OPTIONS.maxUdpSessions;
  const perSource =
    Math.min(
      maxUdpSessions,
      options.maxUdpSessionsPerSource ?? DEFAULT_PROXY_SOCKET_OPTIONS.maxUdpSessionsPerSource,
    ) || Math.ceil(maxUdpSessions / 4);
  const buffer = options.udpBufferBytes ?? 0;
  const restartBackoffMs = countOption('restartBackoffMs', options.restartBackoffMs, 100, 1);
  if (options.threads !== undefined) countOption('threads', options.threads, 0, 0);
  if (options.startTimeoutMs !== undefined)
    countOption('startTimeoutMs', options.startTimeoutMs, 0, 1);
  const engine = new NativeUdpEngine({
    ...startOptions(options),
    restartBackoffMs,
  });
  const settings = {
    maxUdpSessions,
    maxUdpSessionsPerSource: perSource,
    receiveBufferBytes: buffer > 0 ? buffer : DEFAULT_SERVICE_BUFFER_BYTES,
    sessionBufferBytes: buffer,
  };
  const factory = async (ctx: ProxySocketContext): Promise<ProxySocket> => {
    if (String(ctx.protocol).toUpperCase() !== 'UDP') return base(ctx);
    if (options.createSocket !== undefined) {
      throw new NativeUnsupportedError(
        'createSocket',
        "the helper's sockets are its own, not Node's; use the default UDP socket",
        'UDP',
      );
    }
    const what = checkContext(ctx, 'UDP');
    try {
      return await NativeUdpProxySocket.open(ctx, engine, settings);
    } catch (error) {
      throw new SocketOpenError(what, { cause: error });
    }
  };
  return Object.assign(factory, {
    counters: engine.counters,
    helperPid: () => engine.helperPid,
    close: () => engine.close(),
  });
}
