import type { Service } from '@userspace-proxy/core';

/**
 * Records a Service informer's events as `add NAME`, `update NAME`, `delete NAME`, for tests that
 * check what a source delivered (and that it delivered nothing).
 */
export function recordServiceEvents(informer: { addEventHandler(h: object): void }): string[] {
  const events: string[] = [];
  informer.addEventHandler({
    onAdd: (s: Service) => events.push(`add ${s.metadata.name}`),
    onUpdate: (_o: Service, s: Service) => events.push(`update ${s.metadata.name}`),
    onDelete: (s: Service) => events.push(`delete ${s.metadata.name}`),
  });
  return events;
}
