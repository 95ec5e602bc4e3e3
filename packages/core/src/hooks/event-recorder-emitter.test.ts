import { describe, expect, it, vi } from 'vitest';
import { EmitterEventRecorder, type RecordedEvent } from './event-recorder-emitter.js';

describe('EmitterEventRecorder', () => {
  const ref = { kind: 'Service', apiVersion: 'v1', namespace: 'ns', name: 's', uid: 'u1' };

  it("emits each event to 'event' listeners with a timestamp", () => {
    const recorder = new EmitterEventRecorder({ now: () => 1234 });
    const seen: RecordedEvent[] = [];
    recorder.on('event', (e) => seen.push(e));
    recorder.event(ref, 'Warning', 'PortConflict', 'port conflict detected');
    expect(seen).toEqual([
      {
        ref,
        type: 'Warning',
        reason: 'PortConflict',
        message: 'port conflict detected',
        timestamp: 1234,
      },
    ]);
  });

  it('costs nothing and does not throw without listeners', () => {
    const now = vi.fn(() => 1);
    const recorder = new EmitterEventRecorder({ now });
    recorder.event(ref, 'Normal', 'Test', 'x');
    expect(now).not.toHaveBeenCalled();
  });

  it('stops emitting to a removed listener', () => {
    const recorder = new EmitterEventRecorder();
    const listener = vi.fn();
    recorder.on('event', listener);
    recorder.off('event', listener);
    recorder.event(ref, 'Normal', 'Test', 'x');
    expect(listener).not.toHaveBeenCalled();
  });
});
