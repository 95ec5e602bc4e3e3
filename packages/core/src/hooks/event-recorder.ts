import type { ObjectReference } from '../model/model.js';

/** "Warning" for what an operator must act on, "Normal" for the rest. */
export type EventType = 'Normal' | 'Warning';

/**
 * Records events about objects, as Kubernetes Events do: port conflicts, portals that failed, sockets
 * that could not open, NeedPods from an idling socket. The Kubernetes package writes them to the API
 * with flood protection; the core default only emits them in process.
 */
export interface EventRecorder {
  /**
   * Records one event about `ref`. `reason` is a short CamelCase cause to filter on ("PortConflict");
   * `message` is for people. Must not block: the Proxier calls it during a sync.
   */
  event(ref: ObjectReference, type: EventType, reason: string, message: string): void;
}
