import diagnosticsChannel from 'node:diagnostics_channel';

/**
 * Records every message published on `channel` until the function handed to `onCleanup` runs
 * (a test file's afterEach list).
 */
export function recordChannel<T>(channel: string, onCleanup: (fn: () => void) => void): T[] {
  const messages: T[] = [];
  const listener = (message: unknown): void => {
    messages.push(message as T);
  };
  diagnosticsChannel.subscribe(channel, listener);
  onCleanup(() => diagnosticsChannel.unsubscribe(channel, listener));
  return messages;
}
