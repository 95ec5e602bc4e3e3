/**
 * The shapes of the Kubernetes objects the proxy reads. They are plain JSON shaped like the API's own,
 * so a `V1Service` from `@kubernetes/client-node` can be passed as is; every field the proxy does not
 * read is left out, and every field is treated as untrusted input (see `validation.ts`).
 */

/** A transport protocol a Service port may use. Matching is case-sensitive, as in the API. */
export type Protocol = 'TCP' | 'UDP' | 'SCTP';

/** A socket address. `family` is informational; `address` alone decides. */
export interface Addr {
  /** The IP address, without brackets. */
  address: string;
  /** The port number. */
  port: number;
  /** The family, when known. */
  family?: 'IPv4' | 'IPv6';
}

/** The reference the proxy puts on events, so an operator can find the Service it is about. */
export interface ObjectReference {
  /** "v1" for a Service. */
  apiVersion?: string;
  /** "Service", "Node"…: what the event is about. */
  kind: string;
  /** Absent for cluster-scoped objects (a Node). */
  namespace?: string;
  /** The object's name. */
  name: string;
  /** Set when known, so an event never lands on a re-created object of the same name. */
  uid?: string;
}

/** The metadata fields the proxy reads. */
export interface ObjectMeta {
  /** The object's name (a DNS label for Services). */
  name: string;
  /** Absent means "default", as in the API. */
  namespace?: string;
  /** Tells a re-created object from the one it replaced. */
  uid?: string;
  /** The API server's version of the object; kept as given, never compared. */
  resourceVersion?: string;
  /** EndpointSlices name their Service in `kubernetes.io/service-name`. */
  labels?: Record<string, string>;
  /** Read by idling (`idling.alpha.openshift.io/*`) and by integrators' policies. */
  annotations?: Record<string, string>;
}

/** One entry of `spec.ports` of a Service. */
export interface ServicePort {
  /** Required when a Service has more than one port; part of the ServicePortName. */
  name?: string;
  /** Default "TCP". */
  protocol?: Protocol;
  /** What clients connect to on the cluster, external and load-balancer IPs. */
  port: number;
  /** The endpoints' port (a number or a named container port); the endpoint lists carry it. */
  targetPort?: number | string;
  /** The node port, when the Service type gives it one. */
  nodePort?: number;
}

/** The Service types; ExternalName Services are never proxied. */
export type ServiceType = 'ClusterIP' | 'NodePort' | 'LoadBalancer' | 'ExternalName';

/** The fields of core/v1 Service the proxy reads. */
export interface Service {
  /** "v1" when present. */
  apiVersion?: string;
  /** "Service" when present. */
  kind?: string;
  /** Name, namespace, uid, labels and annotations. */
  metadata: ObjectMeta;
  /** What the proxy serves. */
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
  /** The endpoint's IP; the port comes from the subset's ports. */
  ip: string;
  /** Not read by the proxy. */
  hostname?: string;
  /** Not read by the proxy (no topology-aware routing in user space). */
  nodeName?: string;
}

/** One port of a legacy Endpoints subset. */
export interface EndpointPort {
  /** Matches the Service port's name; "" for an unnamed single port. */
  name?: string;
  /** The port the endpoints listen on. */
  port: number;
  /** Default "TCP". */
  protocol?: Protocol;
}

/** core/v1 Endpoints: the legacy API, still what kube-proxy's userspace mode consumed. */
export interface Endpoints {
  /** "v1" when present. */
  apiVersion?: string;
  /** "Endpoints" when present. */
  kind?: string;
  /** Named like its Service. */
  metadata: ObjectMeta;
  /** Each subset: ready and not-ready addresses, and the ports they all listen on. */
  subsets?: {
    /** Ready addresses: the only ones proxied to. */
    addresses?: EndpointAddress[];
    /** Not proxied to. */
    notReadyAddresses?: EndpointAddress[];
    /** The ports of every address of the subset. */
    ports?: EndpointPort[];
  }[];
}

/** The readiness conditions of one EndpointSlice endpoint; an absent field means "unknown". */
export interface EndpointConditions {
  /** Ready endpoints are proxied to; unknown counts as ready, as in kube-proxy. */
  ready?: boolean;
  /** With `terminating`: used only when a Service has no ready endpoint left. */
  serving?: boolean;
  /** The pod is shutting down. */
  terminating?: boolean;
}

/** discovery.k8s.io/v1 EndpointSlice. Its Service is named by the `kubernetes.io/service-name` label. */
export interface EndpointSlice {
  /** "discovery.k8s.io/v1" when present. */
  apiVersion?: string;
  /** "EndpointSlice" when present. */
  kind?: string;
  /** The slice's own name; its Service is in the `kubernetes.io/service-name` label. */
  metadata: ObjectMeta;
  /** FQDN slices are never proxied to. */
  addressType: 'IPv4' | 'IPv6' | 'FQDN';
  /** Each endpoint: its first address is the one proxied to. */
  endpoints: {
    /** Addresses of the family `addressType` names. */
    addresses: string[];
    /** Readiness, as the EndpointSlice controller saw it. */
    conditions?: EndpointConditions;
    /** Not read by the proxy. */
    nodeName?: string;
    /** Not read by the proxy. */
    zone?: string;
  }[];
  /** The ports every endpoint of the slice listens on. */
  ports?: { name?: string; port?: number; protocol?: Protocol }[];
}

/** The label that ties an EndpointSlice to its Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';

/** v1.DefaultClientIPServiceAffinitySeconds: the ClientIP affinity TTL when none is given (3 h). */
export const DEFAULT_CLIENT_IP_AFFINITY_SECONDS = 10_800;
