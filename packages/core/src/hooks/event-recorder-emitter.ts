import { EventEmitter } from 'eventemitter3';
import type { ObjectReference } from '../model/model.js';
import type { EventRecorder, EventType } from './event-recorder.js';

/** One event as {@link EmitterEventRecorder} emits it. */
export interface RecordedEvent {
  /** The object the event is about (a Service, for everything the Proxier records). */
  readonly ref: ObjectReference;
  /** "Warning" for what an operator must act on, "Normal" for the rest. */
  readonly type: EventType;
  /** A short CamelCase cause such as "PortConflict", stable enough to filter on. */
  readonly reason: string;
  /** What happened, for people: names the Service port and what failed. */
  readonly message: string;
  /** When it was recorded, in the recorder's clock (epoch milliseconds by default). */
  readonly timestamp: number;
}

/** The events {@link EmitterEventRecorder} emits. */
export interface EmitterEventRecorderEvents {
  /** One recorded event. */
  event: (event: RecordedEvent) => void;
}

/** Options of {@link EmitterEventRecorder}. */
export interface EmitterEventRecorderOptions {
  /** The clock stamped on each event; injected so tests can fix it. Default `Date.now`. */
  now?: () => number;
}

/**
 * The default {@link EventRecorder}: it keeps nothing and writes nowhere, it only emits an `'event'`
 * for each call, so an embedding program can log, count or forward events without the core depending
 * on a Kubernetes client (the kubernetes package has the recorder that writes core/v1 Events). With no
 * listener an event costs one object allocation.
 *
 * A listener that throws propagates to the caller of {@link EmitterEventRecorder.event}, as with any
 * EventEmitter; the Proxier guards its calls so a faulty listener cannot break a sync.
 */
export class EmitterEventRecorder
  extends EventEmitter<EmitterEventRecorderEvents>
  implements EventRecorder
{
  readonly #now: () => number;

  constructor(options: EmitterEventRecorderOptions = {}) {
    super();
    this.#now = options.now ?? Date.now;
  }

  /** Emits the event to every `'event'` listener, synchronously. */
  event(ref: ObjectReference, type: EventType, reason: string, message: string): void {
    if (this.listenerCount('event') === 0) return;
    this.emit('event', { ref, type, reason, message, timestamp: this.#now() });
  }
}
