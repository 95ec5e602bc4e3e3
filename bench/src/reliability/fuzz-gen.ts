/**
 * Seeded generation of hostile input for the fuzz probe: valid Services, EndpointSlices, Endpoints
 * and KubeProxyConfigurations, each mutated a few times (values swapped for edge cases, fields
 * deleted or added, types changed, lists blown up), and manifest texts mutated byte by byte. The
 * same seed gives the same inputs, so a crash found once can be found again.
 */

import { mulberry32 } from '../../../packages/core/src/test-support/prng.js';

/** A generator of fuzzed inputs. */
export class Fuzzer {
  readonly #r: () => number;
  readonly #net: string;

  /** `net` is a `127.A.B.` prefix: the addresses valid objects use (the live daemon can listen). */
  constructor(seed: number, net = '127.99.99.') {
    // The seeded PRNG that picks mutations: core's mulberry32 (its test-support, by path).
    this.#r = mulberry32(seed);
    this.#net = net;
  }

  int(n: number): number {
    return Math.floor(this.#r() * n);
  }

  pick<T>(list: readonly T[]): T {
    return list[this.int(list.length)] as T;
  }

  #ip(): string {
    return `${this.#net}${20 + this.int(200)}`;
  }

  #edge(): unknown {
    // Megabyte-class strings are rare: they cost the parsers most and find the same thing each time.
    const big = this.int(20) === 0 ? 'a'.repeat(1 + this.int(3) * 50_000) : 'a'.repeat(300);
    const pool: unknown[] = [
      -1,
      0,
      1,
      65_535,
      65_536,
      1e26,
      -0,
      2 ** 53,
      0.5,
      null,
      true,
      false,
      '',
      ' ',
      '8_000',
      '0x50',
      '80',
      'localhost',
      '999.1.1.1',
      '255.255.255.255',
      '0.0.0.0',
      '224.0.0.1',
      '::1',
      '::',
      'fe80::1%eth0',
      '10.0.0.1/8',
      'TCP',
      'UDP',
      'SCTP',
      'tcp',
      'None',
      'ClientIP',
      'LoadBalancer',
      'NodePort',
      'ExternalName',
      '\u0000\u001b[31m\r\n',
      '\u202e\u2028',
      'ünïcødé',
      big,
      [],
      {},
      [null],
      [{}],
      { a: { b: { c: { d: {} } } } },
      Array.from({ length: 50 }, (_, i) => i),
      this.#ip(),
      `${this.#ip()}:80`,
      '__proto__',
      { __proto__: { polluted: true } },
      { constructor: { prototype: { x: 1 } } },
      'kubernetes.io/service-name',
    ];
    return this.pick(pool);
  }

  /** A valid Service on the fuzzer's addresses. */
  service(name = `fz-${this.int(50)}`): Record<string, unknown> {
    const port = 1024 + this.int(60_000);
    return {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name, namespace: this.pick(['default', 'fz', 'kube-system']) },
      spec: {
        type: this.pick(['ClusterIP', 'NodePort', 'LoadBalancer']),
        clusterIP: this.#ip(),
        externalIPs: this.int(3) === 0 ? [this.#ip()] : [],
        sessionAffinity: this.pick(['None', 'ClientIP']),
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 1 + this.int(10_800) } },
        loadBalancerSourceRanges: this.int(3) === 0 ? ['10.0.0.0/8'] : [],
        ports: [
          {
            name: 'p',
            port,
            protocol: this.pick(['TCP', 'UDP']),
            targetPort: 1 + this.int(65_535),
          },
        ],
      },
      status: { loadBalancer: { ingress: this.int(3) === 0 ? [{ ip: this.#ip() }] : [] } },
    };
  }

  /** A valid EndpointSlice. */
  slice(service = `fz-${this.int(50)}`): Record<string, unknown> {
    return {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: {
        name: `${service}-${this.int(100)}`,
        namespace: 'default',
        labels: { 'kubernetes.io/service-name': service },
      },
      addressType: 'IPv4',
      ports: [{ name: 'p', port: 1 + this.int(65_535), protocol: 'TCP' }],
      endpoints: Array.from({ length: 1 + this.int(4) }, () => ({
        addresses: [this.#ip()],
        conditions: { ready: this.int(4) > 0, serving: true, terminating: false },
        nodeName: 'node-1',
        zone: 'z',
      })),
    };
  }

  /** A valid legacy Endpoints object. */
  endpoints(service = `fz-${this.int(50)}`): Record<string, unknown> {
    return {
      apiVersion: 'v1',
      kind: 'Endpoints',
      metadata: { name: service, namespace: 'default' },
      subsets: [
        {
          addresses: [{ ip: this.#ip() }],
          notReadyAddresses: this.int(2) ? [{ ip: this.#ip() }] : [],
          ports: [{ name: 'p', port: 1 + this.int(65_535), protocol: 'TCP' }],
        },
      ],
    };
  }

  /** A valid KubeProxyConfiguration. */
  config(): Record<string, unknown> {
    return {
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      mode: this.pick(['', 'service-port-portal', 'userspace']),
      bindAddress: '0.0.0.0',
      healthzBindAddress: `${this.#ip()}:10256`,
      metricsBindAddress: `${this.#ip()}:10249`,
      udpIdleTimeout: `${1 + this.int(60)}s`,
      iptables: { syncPeriod: '30s', minSyncPeriod: '1s', masqueradeBit: 14 },
      conntrack: { maxPerCore: 32_768, min: 131_072 },
      nodePortAddresses: this.int(2) ? ['primary'] : ['127.0.0.0/8'],
      logging: { format: this.pick(['text', 'json']), verbosity: this.int(5) },
      userspaceProxy: {
        servicesFile: 'services.yaml',
        drainTimeout: '5s',
        maxUdpSessionsPerPort: 1 + this.int(10_000),
        dialTimeouts: ['250ms', '1s'],
        tcpHalfCloseTimeout: '1m',
      },
    };
  }

  /** Applies 1–4 random mutations to `obj` in place and returns it. */
  mutate<T>(obj: T): T {
    const n = 1 + this.int(4);
    for (let i = 0; i < n; i++) this.#mutateOnce(obj as unknown);
    return obj;
  }

  #mutateOnce(root: unknown): void {
    // Walk down a random path of objects/arrays, then act on one key of the node reached.
    let node = root as Record<string, unknown>;
    for (let depth = 0; depth < 6; depth++) {
      const keys = Object.keys(node);
      if (keys.length === 0 || this.int(3) === 0) break;
      const next = node[this.pick(keys)];
      if (typeof next !== 'object' || next === null) break;
      node = next as Record<string, unknown>;
    }
    const keys = Object.keys(node);
    const key = keys.length > 0 && this.int(5) > 0 ? this.pick(keys) : `x${this.int(10)}`;
    const action = this.int(6);
    if (action === 0) delete node[key];
    else if (action === 1 && Array.isArray(node[key]) && this.int(4) === 0) {
      const list = node[key] as unknown[];
      const item = list[0];
      for (let j = 0; j < 1 + this.int(300); j++) list.push(structuredClone(item));
    } else if (action === 2) node[key] = String(node[key]);
    else if (action === 3) node[key] = [node[key]];
    else node[key] = this.#edge();
  }

  /** A manifest text of 1–3 fuzzed objects, as JSON or YAML-ish text, sometimes mangled. */
  manifest(): string {
    const docs = Array.from({ length: 1 + this.int(3) }, () => {
      const kind = this.int(3);
      const name = `fz-${this.int(5)}`;
      const obj =
        kind === 0 ? this.service(name) : kind === 1 ? this.slice(name) : this.endpoints(name);
      return this.int(2) ? this.mutate(obj) : obj;
    });
    let text =
      this.int(3) === 0
        ? JSON.stringify(this.int(2) ? docs : { apiVersion: 'v1', kind: 'List', items: docs })
        : docs.map((d) => JSON.stringify(d, null, 1)).join('\n---\n');
    const textual = this.int(4);
    if (textual === 0) text = this.#mangle(text);
    else if (textual === 1) text = this.pick(YAML_TRICKS);
    return text;
  }

  #mangle(text: string): string {
    const chars = [
      '{',
      '}',
      '[',
      ']',
      ':',
      '-',
      '&a',
      '*a',
      '!!binary',
      '\t',
      '\n',
      '"',
      "'",
      '#',
      '\u0000',
      '%YAML 1.1',
      '<<: *a',
      '? ',
    ];
    let out = text;
    for (let i = 0; i < 1 + this.int(8); i++) {
      const at = this.int(out.length + 1);
      const cut = this.int(3) === 0 ? this.int(20) : 0;
      out = out.slice(0, at) + this.pick(chars) + out.slice(at + cut);
    }
    if (this.int(5) === 0) out = out.slice(0, this.int(out.length));
    return out;
  }
}

/** Hand-written YAML that has broken parsers: alias bombs, deep nesting, odd tags and documents. */
const YAML_TRICKS: readonly string[] = [
  `a: &a ["x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c]\ne: [*d,*d,*d,*d,*d,*d,*d,*d]\nkind: Service\n`,
  `${'['.repeat(200)}${']'.repeat(200)}`,
  `${'- '.repeat(100)}x`,
  `${'{a: '.repeat(100)}1${'}'.repeat(100)}`,
  'kind: !!binary aGVsbG8=\napiVersion: v1\n',
  '--- !!map\n? [a, b]\n: c\n',
  `apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 80}]}\n${'---\n'.repeat(500)}`,
  'kind: Service\nkind: Service\n',
  '%YAML 9.9\n---\nkind: Service\n',
  `apiVersion: v1\nkind: List\nitems: ${JSON.stringify(Array.from({ length: 200 }, () => ({})))}`,
  '\ufeffapiVersion: v1\nkind: Endpoints\nmetadata: {name: a}\nsubsets: [{addresses: [{ip: 1.2.3.4}], ports: [{port: 1e400}]}]\n',
  'apiVersion: v1\nkind: Service\nmetadata: {name: "\\u0000\\e[2J"}\n',
  '',
  '---',
  'null',
  '[]',
  '42',
];
