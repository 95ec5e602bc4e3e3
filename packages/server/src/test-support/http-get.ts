import { get } from 'node:http';

/**
 * GET `url` on a fresh connection: the status, or the error's message ("socket hang up" when the
 * server closes the connection on arrival). Unlike fetch, which can wait a long time on a connection
 * closed at once, it gives up after `timeoutMs`. `localAddress`: the client's own address (a
 * loopback one, to be another client than the test's other connections).
 */
export function httpStatus(
  url: string,
  timeoutMs = 2000,
  localAddress?: string,
): Promise<number | string> {
  return new Promise((resolve) => {
    const options = { timeout: timeoutMs, agent: false, ...(localAddress ? { localAddress } : {}) };
    const req = get(url, options, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve(err.message));
  });
}

/**
 * True for what {@link httpStatus} gives for a connection the server closed on arrival: a hang-up,
 * or a reset when the request was already under way.
 */
export function closedOnArrival(status: number | string): boolean {
  return status === 'socket hang up' || status === 'read ECONNRESET';
}
