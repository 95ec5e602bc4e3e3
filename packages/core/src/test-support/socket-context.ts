import type { LoadBalancer } from '../load-balancing/load-balancer.js';
import type { Logger } from '../logger.js';
import type { Protocol } from '../model/model.js';
import type { ServicePortName } from '../model/service-port-name.js';
import { createSocketContext, type StandaloneSocketContext } from '../sockets/socket-context.js';
import { FakeLoadBalancer } from './fake-load-balancer.js';

/** A socket context for tests: what the three positional arguments of the old factory said. */
export function contextFor(
  protocol: Protocol,
  ip: string | null,
  port: number,
  options: {
    lb?: LoadBalancer;
    servicePort?: ServicePortName;
    logger?: Logger;
    allowedSources?: readonly string[];
  } = {},
): StandaloneSocketContext {
  return createSocketContext({
    protocol,
    ip,
    port,
    loadBalancer: options.lb ?? new FakeLoadBalancer(),
    ...(options.servicePort ? { servicePort: options.servicePort } : {}),
    ...(options.logger ? { logger: options.logger } : {}),
    ...(options.allowedSources ? { allowedSources: options.allowedSources } : {}),
  });
}
