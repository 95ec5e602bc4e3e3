import { readFileSync } from 'node:fs';
import { type AddressInfo, createServer, type Server, Socket } from 'node:net';

/**
 * Loopback plumbing for the probes: a /24 of 127.0.0.0/8 per probe (random, so parallel runs and
 * other tests do not collide), echo backends, manifests, and TCP socket states read from
 * /proc/net/tcp (what `ss` shows, without needing iproute2).
 */

/** A random `127.A.B.` prefix; .1 is the Service address, .2 the daemon's HTTP servers. */
export function subnet(): string {
  const a = 64 + Math.floor(Math.random() * 180);
  const b = 1 + Math.floor(Math.random() * 250);
  return `127.${a}.${b}.`;
}

/** TCP echo servers on several addresses, one port, counting what they hold. */
export interface EchoBackends {
  port: number;
  open(): number;
  close(): Promise<void>;
}

/** Starts an echo server on each of `ips`, all on one port. */
export async function echoBackends(ips: string[], port = 0): Promise<EchoBackends> {
  const servers: Server[] = [];
  const sockets = new Set<Socket>();
  for (const ip of ips) {
    const server = createServer((s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {});
      s.on('data', (c) => s.write(c));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port, host: ip, backlog: 4096 }, () => resolve());
    });
    port = (server.address() as AddressInfo).port;
    servers.push(server);
  }
  return {
    port,
    open: () => sockets.size,
    close: async () => {
      for (const s of sockets) s.destroy();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    },
  };
}

/** One Service port and its endpoints, for {@link manifest}. */
export interface ServiceDoc {
  name: string;
  ip: string;
  port: number;
  protocol?: 'TCP' | 'UDP';
  targetPort: number;
  endpoints: string[];
  annotations?: Record<string, string>;
}

/** A manifest of Services, each with one EndpointSlice. */
export function manifest(services: ServiceDoc[]): string {
  return services
    .map((s) => {
      const protocol = s.protocol ?? 'TCP';
      const ann = Object.entries(s.annotations ?? {})
        .map(([k, v]) => `    ${k}: ${JSON.stringify(v)}\n`)
        .join('');
      const eps = s.endpoints
        .map((ip) => `  - addresses: ["${ip}"]\n    conditions: { ready: true }\n`)
        .join('');
      return `apiVersion: v1
kind: Service
metadata:
  name: ${s.name}
  namespace: soak
${ann ? `  annotations:\n${ann}` : ''}spec:
  clusterIP: ${s.ip}
  ports:
  - { name: p, port: ${s.port}, protocol: ${protocol}, targetPort: ${s.targetPort} }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${s.name}-1
  namespace: soak
  labels: { kubernetes.io/service-name: ${s.name} }
addressType: IPv4
ports:
- { name: p, port: ${s.targetPort}, protocol: ${protocol} }
endpoints:
${eps === '' ? '  []\n' : eps}`;
    })
    .join('---\n');
}

/** The kernel's TCP states by their /proc/net/tcp code. */
export const TCP_STATES: Readonly<Record<string, string>> = {
  '01': 'ESTABLISHED',
  '02': 'SYN_SENT',
  '03': 'SYN_RECV',
  '04': 'FIN_WAIT1',
  '05': 'FIN_WAIT2',
  '06': 'TIME_WAIT',
  '07': 'CLOSE',
  '08': 'CLOSE_WAIT',
  '09': 'LAST_ACK',
  '0A': 'LISTEN',
  '0B': 'CLOSING',
};

function hexEndpoint(hex: string): string {
  const [ip = '', port = ''] = hex.split(':');
  const bytes = [6, 4, 2, 0].map((i) => Number.parseInt(ip.slice(i, i + 2), 16));
  return `${bytes.join('.')}:${Number.parseInt(port, 16)}`;
}

/**
 * Counts IPv4 TCP sockets by state whose local or remote end is one of `endpoints` ("ip:port"):
 * the sockets of the Service port and of its endpoints, on both sides of the proxy.
 */
export function tcpStates(endpoints: string[]): Record<string, number> {
  const want = new Set(endpoints);
  const out: Record<string, number> = {};
  const text = readFileSync('/proc/net/tcp', 'utf8');
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 4) continue;
    const local = hexEndpoint(f[1] as string);
    const remote = hexEndpoint(f[2] as string);
    if (!want.has(local) && !want.has(remote)) continue;
    const state = TCP_STATES[f[3] as string] ?? (f[3] as string);
    out[state] = (out[state] ?? 0) + 1;
  }
  return out;
}

/** A connection that sends a line and reads it back, again and again, and notes how it ended. */
export class EchoClient {
  readonly socket = new Socket();
  #buffer = '';
  #sent = 0;
  #checked = 0;
  connected = false;
  /** Why it ended, if it did: 'error:CODE', 'end' or 'mismatch'. */
  ended?: string;

  constructor(host: string, port: number, localAddress?: string) {
    this.socket.setNoDelay(true);
    this.socket.on('connect', () => {
      this.connected = true;
    });
    this.socket.on('data', (c) => {
      this.#buffer += c.toString();
      let nl = this.#buffer.indexOf('\n');
      while (nl >= 0) {
        const line = this.#buffer.slice(0, nl);
        this.#buffer = this.#buffer.slice(nl + 1);
        if (line.split(' ')[0] !== String(this.#checked)) this.ended ??= 'mismatch';
        this.#checked++;
        nl = this.#buffer.indexOf('\n');
      }
    });
    this.socket.on('error', (e: NodeJS.ErrnoException) => {
      this.ended ??= `error:${e.code ?? e.message}`;
    });
    this.socket.on('end', () => {
      this.ended ??= 'end';
    });
    this.socket.on('close', () => {
      this.ended ??= 'close';
    });
    this.socket.connect({ port, host, ...(localAddress ? { localAddress } : {}) });
  }

  /** Sends the next line (and `padding` bytes on it, to carry traffic). */
  send(padding = ''): void {
    if (this.ended || !this.connected) return;
    this.socket.write(`${this.#sent}${padding ? ` ${padding}` : ''}\n`);
    this.#sent++;
  }

  /** Lines sent and lines read back intact. */
  get sent(): number {
    return this.#sent;
  }

  get checked(): number {
    return this.#checked;
  }

  /** True once every line sent has come back. */
  settled(): boolean {
    return this.#checked === this.#sent;
  }
}

/**
 * Connects to host:port, writes `text` and resolves with the milliseconds until the first byte of
 * the answer, or the error ('ECONNREFUSED', 'TIMEOUT', 'CLOSED').
 */
export function roundTrip(
  host: string,
  port: number,
  text = 'ping\n',
  timeoutMs = 5000,
): Promise<{ ms: number } | { error: string }> {
  return new Promise((resolve) => {
    const started = performance.now();
    const socket = new Socket();
    let done = false;
    const finish = (r: { ms: number } | { error: string }) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => finish({ error: 'TIMEOUT' }), timeoutMs);
    socket.on('data', () => finish({ ms: performance.now() - started }));
    socket.on('error', (e: NodeJS.ErrnoException) => finish({ error: e.code ?? e.message }));
    socket.on('close', () => finish({ error: 'CLOSED' }));
    socket.connect(port, host, () => socket.write(text));
  });
}

/** The `q` quantile (0..1) of `values`, nearest rank. */
export function quantile(values: number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] as number;
}
