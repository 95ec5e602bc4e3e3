import {
  type AcceptPolicyFactory,
  createProxySocketFactory,
  type Logger,
  newCustomProxier,
  type Proxier,
  type ProxierOptions,
  type ProxySocketFactory,
} from '@userspace-proxy/core';
import { PROXY_PROTOCOL_ANNOTATION } from '@userspace-proxy/core/sockets';
import { createIdlingProxySocketFactory, HybridProxier, Idler } from '@userspace-proxy/idler';
import {
  type NativeTcpFactory,
  type NativeUdpFactory,
  withNativeTcp,
  withNativeUdp,
} from '@userspace-proxy/native';
import {
  createRawSctpEngine,
  limitedWarnings,
  UserspaceSctpEngine,
  withSctp,
} from '@userspace-proxy/sctp';
import type { KubeProxyConfiguration } from './config-schema.js';
import type { NativeMetricSources } from './metrics-native.js';
import type { ProxySources } from './sources.js';

/** What the daemon serves with: the Proxier it registers, and what must close after its drain. */
export interface DaemonProxier {
  proxier: Proxier;
  /** The idler, with `--idling`: its counters feed the metrics; `close` after the drain. */
  idler?: Idler;
  /** Stops the idler's timers and the unidle hook's requests (idempotent). */
  close(): Promise<void>;
  /** With `--data-path native`: the helpers' counters, for the daemon's metrics. */
  native?: NativeMetricSources;
}

/**
 * Builds the daemon's Proxier from the configuration: TCP and UDP through core's default sockets,
 * SCTP through `@userspace-proxy/sctp` (RFC 6951 encapsulation on `sctpEncapsulationPort`), and with
 * `--idling` a HybridProxier that moves idled Services (OpenShift's annotations, no endpoints) to an
 * idling proxier whose sockets hold their clients and ask for pods — through the source's unidler
 * on a cluster.
 */
export async function buildDaemonProxier(
  config: KubeProxyConfiguration,
  options: ProxierOptions,
  env: { logger: Logger; sources?: ProxySources },
): Promise<DaemonProxier> {
  // What each step started, undone in reverse when a later step throws: a failed start must not
  // leave an SCTP engine's UDP port bound or a helper running in an embedder's process.
  const undo: Array<() => Promise<void> | void> = [];
  try {
    return await build(config, options, env, undo);
  } catch (error) {
    for (const step of undo.reverse()) {
      try {
        await step();
      } catch (closeError) {
        env.logger.warn(`closing after a failed start: ${String(closeError).slice(0, 200)}`);
      }
    }
    throw error;
  }
}

async function build(
  config: KubeProxyConfiguration,
  options: ProxierOptions,
  env: { logger: Logger; sources?: ProxySources },
  undo: Array<() => Promise<void> | void>,
): Promise<DaemonProxier> {
  const ext = config.userspaceProxy;
  // --sctp-transport=raw: one raw engine for every SCTP socket (main and idling), since two raw
  // stacks on one address would abort each other's associations; started now, so a missing
  // privilege or compiler stops the daemon at start-up with its coded error.
  const association = { mtu: ext.sctpMtu };
  const raw =
    ext.sctpTransport === 'raw'
      ? createRawSctpEngine({ onWarning: limitedWarnings(env.logger), association })
      : undefined;
  if (raw !== undefined) undo.push(() => raw.close());
  await raw?.start();
  // The daemon owns its SCTP engine, raw or not, and closes it after the drain: made inside
  // withSctp, the UDP engine's sockets and any association still open outlived a stopped daemon
  // (an embedder that stops a Daemon and starts another in the process found the port taken).
  // --sctp-transport=udp-helper: the UDP engine on the C helper, started now so that a missing
  // compiler stops the daemon at start-up (ERR_SCTP_UDP_HELPER) rather than at the first Service.
  const udp =
    raw === undefined
      ? new UserspaceSctpEngine({
          onWarning: limitedWarnings(env.logger),
          association,
          udpIo: ext.sctpTransport === 'udp-helper' ? 'helper' : 'node',
        })
      : undefined;
  if (udp !== undefined) undo.push(() => udp.close());
  await udp?.start();
  const engine = raw ?? (udp as UserspaceSctpEngine);
  const sctp = {
    encapsulationPort: ext.sctpEncapsulationPort,
    endpointEncapsulationPort: ext.sctpEncapsulationPort,
    maxAssociations: ext.sctpMaxAssociationsPerPort,
    ...(ext.sctpMaxAssociationsPerAddress > 0
      ? { maxAssociationsPerAddress: ext.sctpMaxAssociationsPerAddress }
      : {}),
    dialTimeoutsMs: [...ext.dialTimeouts],
    engine,
  };
  const withProtocols = (base: ProxySocketFactory): ProxySocketFactory => withSctp(base, sctp);
  const nodeSockets = createProxySocketFactory(options.proxySocket ?? {});
  // --data-path native: TCP through the C helper, the idling proxier's too (the helper holds the
  // clients, the idler's policy decides in Node; one helper for both proxiers). A Service that asks
  // for a PROXY protocol header keeps Node's socket: the helper does not write it.
  const native: NativeTcpFactory | undefined =
    ext.dataPath === 'native' ? withNativeTcp(nodeSockets, options.proxySocket ?? {}) : undefined;
  const route =
    (node: ProxySocketFactory, helper: ProxySocketFactory): ProxySocketFactory =>
    (ctx) =>
      ctx.service?.metadata?.annotations?.[PROXY_PROTOCOL_ANNOTATION] !== undefined
        ? node(ctx)
        : helper(ctx);
  const tcp: ProxySocketFactory = native === undefined ? nodeSockets : route(nodeSockets, native);
  // And UDP through the UDP helper (its own process: one protocol's helper can die and restart
  // without the other's), recvmmsg/sendmmsg in batches. The idling proxier's UDP stays in Node:
  // while a Service is idled its datagrams are dropped or buffered there.
  const udpOptions = options.proxySocket ?? {};
  const nativeUdp: NativeUdpFactory | undefined =
    native === undefined
      ? undefined
      : withNativeUdp(tcp, {
          ...(udpOptions.maxUdpSessions !== undefined
            ? { maxUdpSessions: udpOptions.maxUdpSessions }
            : {}),
          ...(udpOptions.maxUdpSessionsPerSource !== undefined
            ? { maxUdpSessionsPerSource: udpOptions.maxUdpSessionsPerSource }
            : {}),
          ...(udpOptions.udpBufferBytes !== undefined
            ? { udpBufferBytes: udpOptions.udpBufferBytes }
            : {}),
        });
  const closeSockets = async (): Promise<void> => {
    await engine.close();
    await native?.close();
    await nativeUdp?.close();
  };
  undo.push(async () => {
    await native?.close();
    await nativeUdp?.close();
  });
  const main = await newCustomProxier(options, withProtocols(nativeUdp ?? tcp));
  undo.push(() => main.shutdown());
  const counters =
    native !== undefined && nativeUdp !== undefined
      ? { native: { tcp: native.counters, udp: nativeUdp.counters } }
      : {};
  if (!ext.idling) return { proxier: main, close: closeSockets, ...counters };
  const unidler = env.sources?.createUnidler?.();
  if (unidler !== undefined) undo.push(() => unidler.close());
  const idler = new Idler({
    maxHeldPerServicePort: ext.idlingMaxHeldPerPort,
    holdTimeoutMs: ext.idlingHoldTimeout,
    ...(options.recorder ? { recorder: options.recorder } : {}),
    ...(unidler ? { unidleHook: unidler } : {}),
    logger: env.logger,
  });
  undo.push(() => idler.close());
  // The idling proxier keeps its own load balancer (the daemon's is the main proxier's).
  const { loadBalancer: _main, ...idlingOptions } = options;
  const idling = await newCustomProxier(
    idlingOptions,
    createIdlingProxySocketFactory({
      idler,
      base: withProtocols(createProxySocketFactory(options.proxySocket ?? {})),
      ...(options.proxySocket ?? {}),
      ...(native === undefined
        ? {}
        : {
            tcp: (acceptPolicy: AcceptPolicyFactory) =>
              route(
                createProxySocketFactory({ ...(options.proxySocket ?? {}), acceptPolicy }),
                native.withAcceptPolicy(acceptPolicy),
              ),
          }),
    }),
  );
  env.logger.info(
    `idling on: idled Services hold up to ${ext.idlingMaxHeldPerPort} clients per port for ` +
      `${ext.idlingHoldTimeout} ms${unidler ? ', and their workloads are scaled back up' : ''}`,
  );
  let closed: Promise<void> | undefined;
  return {
    // Each proxier has a load balancer of its own (none is passed in the options): removing a port
    // from one must never wipe the other's rotation. Conntrack is cleared on every switch.
    proxier: new HybridProxier({
      main,
      idling,
      idler,
      ...(options.conntrack ? { conntrack: options.conntrack } : {}),
    }),
    idler,
    ...counters,
    close: () => {
      closed ??= (async () => {
        idler.close();
        await unidler?.close();
        await closeSockets();
      })();
      return closed;
    },
  };
}
