/**
 * Manifest texts for tests: a Service on a loopback "ClusterIP" (127.0.0.0/8 addresses are all
 * local on Linux, so service-port-portal mode can listen on them without root) with its endpoints.
 */

export interface ServiceSpec {
  name?: string;
  namespace?: string;
  clusterIP: string;
  port: number;
  protocol?: 'TCP' | 'UDP' | 'SCTP';
  portName?: string;
  endpoints: { ip: string; port: number }[];
}

/** A Service and one EndpointSlice, as YAML documents. */
export function serviceWithSlice(spec: ServiceSpec): string {
  const name = spec.name ?? 'web';
  const ns = spec.namespace ?? 'default';
  const protocol = spec.protocol ?? 'TCP';
  const portName = spec.portName ?? 'http';
  const targetPort = spec.endpoints[0]?.port ?? spec.port;
  const endpoints = spec.endpoints
    .map((e) => `  - addresses: ["${e.ip}"]\n    conditions: { ready: true }\n`)
    .join('');
  return `apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: ${ns} }
spec:
  clusterIP: ${spec.clusterIP}
  ports:
  - { name: ${portName}, port: ${spec.port}, protocol: ${protocol}, targetPort: ${targetPort} }
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${name}-1
  namespace: ${ns}
  labels: { kubernetes.io/service-name: ${name} }
addressType: IPv4
ports:
- { name: ${portName}, port: ${targetPort}, protocol: ${protocol} }
endpoints:
${endpoints === '' ? '  []\n' : endpoints}`;
}
