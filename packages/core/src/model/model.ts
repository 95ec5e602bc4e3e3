/**
 * The shapes of the Kubernetes objects the proxy reads. They are plain JSON shaped like the API's own,
 * so a `V1Service` from `@kubernetes/client-node` can be passed as is; every field the proxy does not
 * read is left out, and every field is treated as untrusted input (see `validation.ts`).
 */

/** A transport protocol a Service port may use. Matching is case-sensitive, as in the API. */
export type Protocol = 'TCP' | 'UDP' | 'SCTP';

/** A socket address. `family` is informational; `address` alone decides. */
export interface Addr {
  address: string;
  port: number;
  family?: 'IPv4' | 'IPv6';
}

/** The reference the proxy puts on events, so an operator can find the Service it is about. */
export interface ObjectReference {
  apiVersion?: string;
  kind: string;
  namespace?: string;
  name: string;
  uid?: string;
}

/** The metadata fields the proxy reads. */
export interface ObjectMeta {
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

/** One entry of `spec.ports` of a Service. */
export interface ServicePort {
  name?: string;
  protocol?: Protocol;
  port: number;
  targetPort?: number | string;
  nodePort?: number;
}

/** The Service types; ExternalName Services are never proxied. */
export type ServiceType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalName';

/** The fields of core/v1 Service the proxy reads. */
export interface Service {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  spec: {
    type?: ServiceType;
    clusterIP?: string;
    clusterIPs?: string[];
    ports?: ServicePort[];
    externalIPs?: string[];
    sessionAffinity?: 'None' | 'ClientIP';
    sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
    loadBalancerSourceRanges?: string[];
  };
  status?: { loadBalancer?: { ingress?: { ip?: string; hostname?: string }[] } };
}

/** One address of a legacy Endpoints subset. */
export interface EndpointAddress {
  ip: string;
  hostname?: string;
  nodeName?: string;
}

/** One port of a legacy Endpoints subset. */
export interface EndpointPort {
  name?: string;
  port: number;
  protocol?: Protocol;
}

/** core/v1 Endpoints: the legacy API, still what kube-proxy's userspace mode consumed. */
export interface Endpoints {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  subsets?: {
    addresses?: EndpointAddress[];
    notReadyAddresses?: EndpointAddress[];
    ports?: EndpointPort[];
  }[];
}

/** The readiness conditions of one EndpointSlice endpoint; an absent field means "unknown". */
export interface EndpointConditions {
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
}

/** discovery.k8s.io/v1 EndpointSlice. Its Service is named by the `kubernetes.io/service-name` label. */
export interface EndpointSlice {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  addressType: 'IPv4' | 'IPv6' | 'FQDN';
  endpoints: {
    addresses: string[];
    conditions?: EndpointConditions;
    nodeName?: string;
    zone?: string;
  }[];
  ports?: { name?: string; port?: number; protocol?: Protocol }[];
}

/** The label that ties an EndpointSlice to its Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

/** v1.DefaultClientIPServiceAffinitySeconds: the ClientIP affinity TTL when none is given (3 h). */
export const DEFAULT_CLIENT_IP_AFFINITY_SECONDS = 10_800;
