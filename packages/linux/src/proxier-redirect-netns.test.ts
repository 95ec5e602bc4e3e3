import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Endpoints, Protocol, Service } from '@userspace-proxy/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { waitFor } from '../../core/src/test-support/wait-for.js';
import { IptablesPortalManager } from './portal-manager-iptables.js';
import {
  captureRules,
  conntrackFlows,
  kubeRules,
  type Netns,
  NetnsSandbox,
  netnsSupport,
  runNode,
  TCP_PROBE,
  UDP_PROBE,
} from './test-support/netns.js';

/**
 * The whole redirect mode against a real kernel: a Proxier with the iptables PortalManager and the
 * exec conntrack cleaner runs in a child process inside namespace A (the "node", echo servers as
 * endpoints), and namespace B (another host on a veth, with routes for the Service, external and
 * load-balancer ranges through A) is the client. Every answer B gets went through the node's NAT
 * rules to a proxy port, and every check of rules or flows reads the kernel (iptables-save,
 * conntrack -L), not the Proxier.
 */
const support = netnsSupport(['iptables', 'iptables-save', 'conntrack']);
const why = support.ok ? '' : ` (skipped: ${support.reason})`;

const CHILD = fileURLToPath(new URL('./test-support/redirect-child.ts', import.meta.url));
const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const A_IP = '10.203.0.1';
const B_IP = '10.203.0.2';
/** What a probe that must go unanswered waits; a refusal usually comes far sooner. */
const SILENCE_MS = 1_500;

interface Info {
  service: string;
  protocol: Protocol;
  portal: { ip: string; port: number };
  proxyPort: number;
  nodePort: number;
}
interface Reply {
  id?: number;
  error?: string;
  infos?: Info[];
  ready?: boolean;
  tcp?: number;
  udp?: number;
  event?: { type: string; reason: string; message: string };
  refused?: string;
}

/** Drives redirect-child.ts: one JSON command per line in, one answer per command out. */
class ProxierChild {
  readonly events: NonNullable<Reply['event']>[] = [];
  /** The reason of every client the Proxier's sockets refused. */
  readonly refusals: string[] = [];
  tcpPort = 0;
  udpPort = 0;
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, (reply: Reply) => void>();
  #stderr = '';
  #ready = false;
  #exited = false;
  #nextId = 1;

  constructor(child: ChildProcess) {
    this.#child = child;
    let buffered = '';
    child.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
        this.#onLine(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      this.#stderr = (this.#stderr + chunk.toString()).slice(-20_000);
    });
    child.once('exit', () => {
      this.#exited = true;
    });
  }

  #onLine(line: string): void {
    const reply = JSON.parse(line) as Reply;
    if (reply.event) this.events.push(reply.event);
    else if (reply.refused) this.refusals.push(reply.refused);
    else if (reply.ready) {
      this.tcpPort = reply.tcp ?? 0;
      this.udpPort = reply.udp ?? 0;
      this.#ready = true;
    } else if (reply.id !== undefined) this.#pending.get(reply.id)?.(reply);
  }

  /** Resolves once the Proxier has run its first sync. */
  async ready(): Promise<void> {
    await waitFor(() => this.#ready || this.#exited, 18_000, 'the child proxier to start');
    if (!this.#ready) throw new Error(`the child exited: ${this.#stderr}`);
  }

  /** Sends a command; resolves with its answer (rejects with the child's log on an error). */
  request(command: Record<string, unknown>): Promise<Reply> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => fail('no answer within 17 s'), 17_000);
      const fail = (why: string): void => {
        clearTimeout(timer);
        this.#pending.delete(id);
        reject(new Error(`${JSON.stringify(command).slice(0, 200)}: ${why}\n${this.#stderr}`));
      };
      this.#pending.set(id, (reply) => {
        clearTimeout(timer);
        this.#pending.delete(id);
        if (reply.error) fail(reply.error);
        else resolve(reply);
      });
      if (this.#exited) fail('the child has exited');
      else this.#child.stdin?.write(`${JSON.stringify({ id, ...command })}\n`);
    });
  }

  /** Adds or updates a Service; resolves with the proxied Service ports once it is applied. */
  async service(service: Service): Promise<Info[]> {
    return (await this.request({ cmd: 'service', service })).infos ?? [];
  }

  async deleteService(name: string): Promise<Info[]> {
    return (await this.request({ cmd: 'deleteService', namespace: 'default', name })).infos ?? [];
  }

  async endpoints(endpoints: Endpoints): Promise<void> {
    await this.request({ cmd: 'endpoints', endpoints });
  }

  /** Warning events the Proxier recorded (a portal that failed, a socket that did not open…). */
  warnings(): string[] {
    return this.events.filter((e) => e.type === 'Warning').map((e) => e.message);
  }
}

/** The proxy port of the Service port of `name` with this protocol and Service port. */
function proxyPortOf(infos: Info[], name: string, protocol: Protocol, port: number): number {
  const info = infos.find(
    (i) => i.service === `default/${name}` && i.protocol === protocol && i.portal.port === port,
  );
  if (!info) throw new Error(`no ${protocol} ${port} of ${name} in ${JSON.stringify(infos)}`);
  return info.proxyPort;
}

/** Endpoints of `name` at the node's echo servers, for each named port. */
function echoEndpoints(
  name: string,
  child: ProxierChild,
  ports: { name: string; protocol: Protocol }[],
): Endpoints {
  return {
    metadata: { name, namespace: 'default' },
    subsets: [
      {
        addresses: [{ ip: A_IP }],
        ports: ports.map((p) => ({
          ...p,
          port: p.protocol === 'UDP' ? child.udpPort : child.tcpPort,
        })),
      },
    ],
  };
}

/** Expects rules for `ip:port` in the container chain, every one of them sending to `proxyPort`. */
function expectCaptured(
  rules: string[],
  ip: string | null,
  protocol: 'tcp' | 'udp',
  port: number,
  proxyPort: number,
): void {
  const lines = captureRules(rules, ip, protocol, port).filter(
    (l) => !l.startsWith('-A KUBE-NODEPORT-NON-LOCAL'),
  );
  const chain = ip === null ? 'KUBE-NODEPORT-CONTAINER' : 'KUBE-PORTALS-CONTAINER';
  expect(lines.some((l) => l.startsWith(`-A ${chain} `))).toBe(true);
  for (const l of lines) expect(l).toMatch(new RegExp(`(--to-ports |:)${proxyPort}$`));
}

describe.skipIf(!support.ok)(`the redirect-mode Proxier in a network namespace${why}`, () => {
  const sandbox = new NetnsSandbox();
  let a: Netns;
  let b: Netns;
  let child: ProxierChild;

  beforeAll(async () => {
    ({ node: a, client: b } = await sandbox.nodeAndClient({
      addressA: `${A_IP}/24`,
      addressB: `${B_IP}/24`,
      serviceRange: '10.96.0.0/16',
    }));
    for (const range of ['203.0.113.0/24', '198.51.100.0/24']) {
      await b.exec('ip', ['route', 'add', range, 'via', A_IP]);
    }
    child = new ProxierChild(
      sandbox.spawnIn(
        a,
        [process.execPath, '--conditions=@userspace-proxy/source', '--import', 'tsx', CHILD, A_IP],
        { cwd: REPO },
      ),
    );
    await child.ready();
  }, 30_000);
  afterAll(() => sandbox.cleanup());

  const tcp = (host: string, port: number, text: string, ms = 5_000) =>
    runNode(b, TCP_PROBE, [host, String(port), text, String(ms)]);
  const udp = async (host: string, port: number, text: string, ms = 5_000) => {
    const out = await runNode(b, UDP_PROBE, [host, String(port), text, String(ms)]);
    return out === 'TIMEOUT' ? out : (JSON.parse(out) as { from: string; data: string });
  };

  it('serves TCP and UDP from another host through the cluster, external and load-balancer IPs and node ports', async () => {
    await child.endpoints(
      echoEndpoints('web', child, [
        { name: 'tcp', protocol: 'TCP' },
        { name: 'udp', protocol: 'UDP' },
      ]),
    );
    const infos = await child.service({
      metadata: { name: 'web', namespace: 'default', uid: 'uid-web' },
      spec: {
        type: 'LoadBalancer',
        clusterIP: '10.96.10.10',
        externalIPs: ['203.0.113.10'],
        ports: [
          { name: 'tcp', protocol: 'TCP', port: 80, targetPort: child.tcpPort, nodePort: 30080 },
          { name: 'udp', protocol: 'UDP', port: 53, targetPort: child.udpPort, nodePort: 30053 },
        ],
      },
      status: { loadBalancer: { ingress: [{ ip: '198.51.100.10' }] } },
    });
    try {
      const tcpProxy = proxyPortOf(infos, 'web', 'TCP', 80);
      const udpProxy = proxyPortOf(infos, 'web', 'UDP', 53);
      expect(tcpProxy).not.toBe(udpProxy);

      // The kernel holds a capture rule per Service address and node port, to the proxy ports.
      const rules = await kubeRules(a);
      for (const ip of ['10.96.10.10', '203.0.113.10', '198.51.100.10']) {
        expectCaptured(rules, ip, 'tcp', 80, tcpProxy);
        expectCaptured(rules, ip, 'udp', 53, udpProxy);
      }
      expectCaptured(rules, null, 'tcp', 30080, tcpProxy);
      expectCaptured(rules, null, 'udp', 30053, udpProxy);

      // From B, every address answers, and UDP replies come back from the address B asked.
      const targets: [string, number, number][] = [
        ['10.96.10.10', 80, 53],
        ['203.0.113.10', 80, 53],
        ['198.51.100.10', 80, 53],
        [A_IP, 30080, 30053],
      ];
      const answers = await Promise.all(
        targets.map(async ([ip, tcpPort, udpPort]) => [
          await tcp(ip, tcpPort, `t-${ip}`),
          await udp(ip, udpPort, `u-${ip}`),
        ]),
      );
      expect(answers).toEqual(
        targets.map(([ip, , udpPort]) => [
          `tcp:t-${ip}`,
          { from: `${ip}:${udpPort}`, data: `udp:u-${ip}` },
        ]),
      );

      // The node port went through the NAT rule to the proxy port, not to the node-port listener.
      const flows = await conntrackFlows(a, A_IP, 'tcp');
      expect(flows).toMatch(
        new RegExp(`dport=30080 src=${A_IP.replaceAll('.', '\\.')} dst=\\S+ sport=${tcpProxy} `),
      );
      expect(child.warnings()).toEqual([]);
    } finally {
      await child.deleteService('web').catch(() => undefined);
    }
  });

  it('moves the portals when a Service port changes; the old port is captured no more', async () => {
    await child.endpoints(echoEndpoints('moving', child, [{ name: 'http', protocol: 'TCP' }]));
    const service = (port: number, nodePort: number): Service => ({
      metadata: { name: 'moving', namespace: 'default' },
      spec: {
        type: 'NodePort',
        clusterIP: '10.96.20.20',
        ports: [{ name: 'http', protocol: 'TCP', port, targetPort: child.tcpPort, nodePort }],
      },
    });
    try {
      const before = proxyPortOf(await child.service(service(80, 30081)), 'moving', 'TCP', 80);
      expectCaptured(await kubeRules(a), '10.96.20.20', 'tcp', 80, before);
      expect(await tcp('10.96.20.20', 80, 'first')).toBe('tcp:first');

      const after = proxyPortOf(await child.service(service(8080, 30082)), 'moving', 'TCP', 8080);
      const rules = await kubeRules(a);
      expect(captureRules(rules, '10.96.20.20', 'tcp', 80)).toEqual([]);
      expect(captureRules(rules, null, 'tcp', 30081)).toEqual([]);
      expectCaptured(rules, '10.96.20.20', 'tcp', 8080, after);
      expectCaptured(rules, null, 'tcp', 30082, after);

      const [moved, nodePort, oldPort, oldNodePort] = await Promise.all([
        tcp('10.96.20.20', 8080, 'moved'),
        tcp(A_IP, 30082, 'np'),
        tcp('10.96.20.20', 80, 'old', SILENCE_MS),
        tcp(A_IP, 30081, 'old-np', SILENCE_MS),
      ]);
      expect(moved).toBe('tcp:moved');
      expect(nodePort).toBe('tcp:np');
      // Nothing captures the old cluster-IP port any more: the node drops it (it does not forward).
      expect(oldPort).toMatch(/^(TIMEOUT|ECONNREFUSED|EHOSTUNREACH)$/);
      // The old node port has neither a rule nor a listener: the node refuses it.
      expect(oldNodePort).toBe('ECONNREFUSED');
      expect(child.warnings()).toEqual([]);
    } finally {
      await child.deleteService('moving').catch(() => undefined);
    }
  });

  it("removes a deleted Service's rules and clears the conntrack flows of its UDP addresses only", async () => {
    await child.endpoints(
      echoEndpoints('dns', child, [
        { name: 'dns', protocol: 'UDP' },
        { name: 'dns-tcp', protocol: 'TCP' },
      ]),
    );
    await child.endpoints(echoEndpoints('keep', child, [{ name: 'dns', protocol: 'UDP' }]));
    await child.service({
      metadata: { name: 'dns', namespace: 'default' },
      spec: {
        clusterIP: '10.96.30.30',
        externalIPs: ['203.0.113.30'],
        ports: [
          { name: 'dns', protocol: 'UDP', port: 53, targetPort: child.udpPort },
          { name: 'dns-tcp', protocol: 'TCP', port: 53, targetPort: child.tcpPort },
        ],
      },
    });
    await child.service({
      metadata: { name: 'keep', namespace: 'default' },
      spec: {
        clusterIP: '10.96.30.31',
        ports: [{ name: 'dns', protocol: 'UDP', port: 53, targetPort: child.udpPort }],
      },
    });
    try {
      const replies = await Promise.all([
        udp('10.96.30.30', 53, 'a'),
        udp('203.0.113.30', 53, 'b'),
        udp('10.96.30.31', 53, 'c'),
        tcp('10.96.30.30', 53, 'd'),
      ]);
      expect(replies).toEqual([
        { from: '10.96.30.30:53', data: 'udp:a' },
        { from: '203.0.113.30:53', data: 'udp:b' },
        { from: '10.96.30.31:53', data: 'udp:c' },
        'tcp:d',
      ]);
      // The flows B's datagrams left on the node (kept for tens of seconds unless deleted).
      for (const ip of ['10.96.30.30', '203.0.113.30', '10.96.30.31']) {
        await waitFor(async () => (await conntrackFlows(a, ip)).includes(`dst=${ip} `), 5_000, ip);
      }

      // The answer comes after the sync, conntrack clean-up included.
      await child.deleteService('dns');
      const rules = await kubeRules(a);
      expect(rules.filter((l) => /10\.96\.30\.30|203\.0\.113\.30|default\/dns:/.test(l))).toEqual(
        [],
      );
      expect(captureRules(rules, '10.96.30.31', 'udp', 53)).not.toEqual([]);
      expect(await conntrackFlows(a, '10.96.30.30')).toBe('');
      expect(await conntrackFlows(a, '203.0.113.30')).toBe('');
      expect(await conntrackFlows(a, '10.96.30.31')).toContain('dst=10.96.30.31 ');

      const after = await Promise.all([
        udp('10.96.30.30', 53, 'late', SILENCE_MS),
        udp('203.0.113.30', 53, 'late', SILENCE_MS),
        tcp('10.96.30.30', 53, 'late', SILENCE_MS),
        udp('10.96.30.31', 53, 'still'),
      ]);
      expect(after.slice(0, 2)).toEqual(['TIMEOUT', 'TIMEOUT']);
      expect(after[2]).toMatch(/^(TIMEOUT|ECONNREFUSED|EHOSTUNREACH)$/);
      expect(after[3]).toEqual({ from: '10.96.30.31:53', data: 'udp:still' });
      expect(child.warnings()).toEqual([]);
    } finally {
      await child.deleteService('dns').catch(() => undefined);
      await child.deleteService('keep').catch(() => undefined);
    }
  });

  it('admits only the source ranges at a redirected load-balancer IP, TCP and UDP, counted', async () => {
    const LB_IP = '198.51.100.40';
    await child.endpoints(
      echoEndpoints('ranged', child, [
        { name: 'tcp', protocol: 'TCP' },
        { name: 'udp', protocol: 'UDP' },
      ]),
    );
    const service = (ranges: string[]): Service => ({
      metadata: { name: 'ranged', namespace: 'default' },
      spec: {
        type: 'LoadBalancer',
        clusterIP: '10.96.40.40',
        loadBalancerSourceRanges: ranges,
        ports: [
          { name: 'tcp', protocol: 'TCP', port: 80, targetPort: child.tcpPort },
          { name: 'udp', protocol: 'UDP', port: 53, targetPort: child.udpPort },
        ],
      },
      status: { loadBalancer: { ingress: [{ ip: LB_IP }] } },
    });
    const lbPortOf = (infos: Info[], protocol: Protocol): number =>
      infos.find(
        (i) => i.service === 'default/ranged' && i.protocol === protocol && i.portal.ip === LB_IP,
      )?.proxyPort ?? 0;
    try {
      // B inside the ranges: served at the load-balancer IP, through a proxy port of its own.
      const infos = await child.service(service([`${B_IP}/32`]));
      const tcpProxy = proxyPortOf(infos, 'ranged', 'TCP', 80);
      const tcpLb = lbPortOf(infos, 'TCP');
      const udpLb = lbPortOf(infos, 'UDP');
      expect(tcpLb).not.toBe(0);
      expect(tcpLb).not.toBe(tcpProxy);
      const rules = await kubeRules(a);
      expectCaptured(rules, '10.96.40.40', 'tcp', 80, tcpProxy);
      expectCaptured(rules, LB_IP, 'tcp', 80, tcpLb);
      expectCaptured(rules, LB_IP, 'udp', 53, udpLb);
      expect(await tcp(LB_IP, 80, 'in')).toBe('tcp:in');
      expect(await udp(LB_IP, 53, 'in')).toEqual({ from: `${LB_IP}:53`, data: 'udp:in' });

      // B outside the ranges: closed (TCP) and dropped (UDP) at the load-balancer IP, counted;
      // the cluster IP still serves it.
      await child.service(service(['192.0.2.0/24']));
      const before = child.refusals.filter((r) => r === 'source-range').length;
      const [refusedTcp, refusedUdp, cluster] = await Promise.all([
        tcp(LB_IP, 80, 'out', SILENCE_MS),
        udp(LB_IP, 53, 'out', SILENCE_MS),
        tcp('10.96.40.40', 80, 'cluster'),
      ]);
      expect(refusedTcp).toMatch(/^(CLOSED|ECONNRESET)$/);
      expect(refusedUdp).toBe('TIMEOUT');
      expect(cluster).toBe('tcp:cluster');
      await waitFor(
        () => child.refusals.filter((r) => r === 'source-range').length - before >= 2,
        5_000,
        'two source-range refusals',
      );
      expect(child.warnings()).toEqual([]);
    } finally {
      await child.deleteService('ranged').catch(() => undefined);
    }
  });

  // Last: it ends the child.
  it('leaves no portal rule after shutdown, and cleanupLeftovers then removes the chains', async () => {
    await child.endpoints(echoEndpoints('last', child, [{ name: 'http', protocol: 'TCP' }]));
    await child.service({
      metadata: { name: 'last', namespace: 'default' },
      spec: {
        type: 'NodePort',
        clusterIP: '10.96.40.40',
        ports: [{ name: 'http', protocol: 'TCP', port: 80, nodePort: 30084 }],
      },
    });
    expect(await tcp('10.96.40.40', 80, 'x')).toBe('tcp:x');
    expect((await kubeRules(a)).filter((l) => l.includes('default/last:http'))).not.toEqual([]);

    await child.request({ cmd: 'shutdown' });
    const rules = await kubeRules(a);
    expect(rules.filter((l) => l.startsWith('-A KUBE-'))).toEqual([]);
    // The chains and jump rules stay for the next run, which flushes them; --cleanup removes them.
    expect(rules).toContain(':KUBE-PORTALS-CONTAINER -');
    await new IptablesPortalManager({ runner: a.runner }).cleanupLeftovers();
    expect(await kubeRules(a)).toEqual([]);
  });
});
