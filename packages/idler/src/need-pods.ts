import {
  type EventRecorder,
  type Logger,
  type Service,
  type ServicePortName,
  servicePortNameString,
} from '@userspace-proxy/core';
import { type IdlerNeedPodsMessage, idlerChannels } from './diagnostics.js';
import type { UnidleHook } from './unidle-hook.js';

/** The Event reason OpenShift's unidling controller watches for. */
export const NEED_PODS_REASON = 'NeedPods';

/** The NeedPods Event message of a Service port, as OpenShift words it (port name included). */
export function needPodsMessage(servicePort: ServicePortName): string {
  return `The service-port ${servicePortNameString(servicePort)} needs pods.`;
}

/**
 * Sends NeedPods: a core/v1 Event about the Service through the EventRecorder, and the unidle hook
 * beside it. Neither may break the socket that asks: a failure is logged and counted.
 */
export class NeedPodsSignaller {
  readonly #recorder: EventRecorder | undefined;
  readonly #hook: UnidleHook | undefined;
  readonly #log: Logger;
  /** NeedPods sent (Event and hook together count once). */
  sent = 0;
  /** Recorder or hook calls that threw. */
  failures = 0;

  constructor(recorder: EventRecorder | undefined, hook: UnidleHook | undefined, log: Logger) {
    this.#recorder = recorder;
    this.#hook = hook;
    this.#log = log;
  }

  /** Asks for pods for `servicePort`; `signal` aborts when the request is moot. */
  send(
    service: Service,
    servicePort: ServicePortName,
    protocol: 'TCP' | 'UDP',
    repeat: boolean,
    signal: AbortSignal,
  ): void {
    this.sent++;
    const name = servicePortNameString(servicePort);
    this.#log.debug(`asking for pods for ${name}${repeat ? ' again' : ''}`);
    try {
      this.#recorder?.event(
        { kind: 'Service', namespace: servicePort.namespace, name: servicePort.name },
        'Normal',
        NEED_PODS_REASON,
        needPodsMessage(servicePort),
      );
    } catch (error) {
      this.failures++;
      this.#log.error(`recording NeedPods for ${name} failed`, error);
    }
    try {
      this.#hook?.needPods({ service, servicePort, signal });
    } catch (error) {
      this.failures++;
      this.#log.error(`the unidle hook failed for ${name}`, error);
    }
    if (idlerChannels.needPods.hasSubscribers) {
      const message: IdlerNeedPodsMessage = { service: name, protocol, repeat };
      idlerChannels.needPods.publish(message);
    }
  }
}
