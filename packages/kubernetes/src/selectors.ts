/**
 * The selectors kube-proxy lists and watches with, and the same rules as predicates. The API server
 * applies the selectors for the informers this package builds; the predicates let an integrator's
 * informer, which may watch everything, be filtered on the client to the same set, so a Service that
 * another proxy owns is never served twice.
 */

/** A Service (or its endpoints) carrying this label belongs to another proxy and is skipped. */
export const SERVICE_PROXY_NAME_LABEL = 'service.kubernetes.io/service-proxy-name';

/** The endpoints controller puts this label on the endpoints of headless Services. */
export const HEADLESS_LABEL = 'service.kubernetes.io/headless';

/**
 * The label selector kube-proxy's informer factory applies to Services, Endpoints and EndpointSlices:
 * neither label may be present.
 */
export const PROXY_LABEL_SELECTOR = `!${SERVICE_PROXY_NAME_LABEL},!${HEADLESS_LABEL}`;

/** The field selector kube-proxy applies to Services: headless Services have nothing to proxy. */
export const SERVICE_FIELD_SELECTOR = 'spec.clusterIP!=None';

/** The field selector that restricts the Node informer to this proxy's own Node. */
export function nodeFieldSelector(nodeName: string): string {
  return `metadata.name=${nodeName}`;
}

/** The one part of an object the label predicates read; any Service or Endpoints-like object fits. */
export interface Labelled {
  metadata?: { labels?: Record<string, string> | undefined } | undefined;
}

function hasLabel(obj: Labelled, label: string): boolean {
  const labels = obj.metadata?.labels;
  return labels !== undefined && labels !== null && Object.hasOwn(labels, label);
}

/** True when an object passes {@link PROXY_LABEL_SELECTOR}. */
export function matchesProxyLabels(obj: Labelled): boolean {
  return !hasLabel(obj, SERVICE_PROXY_NAME_LABEL) && !hasLabel(obj, HEADLESS_LABEL);
}

/** True when a Service passes both of kube-proxy's Service selectors. */
export function isProxiedService(svc: Labelled & { spec?: { clusterIP?: string } }): boolean {
  return matchesProxyLabels(svc) && svc.spec?.clusterIP !== 'None';
}

/** True when an EndpointSlice or Endpoints object passes kube-proxy's selector. */
export function isProxiedEndpoints(obj: Labelled): boolean {
  return matchesProxyLabels(obj);
}
