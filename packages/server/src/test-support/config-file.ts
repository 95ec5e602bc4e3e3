/**
 * The `KubeProxyConfiguration` text the daemon's process tests write: the header, the health and
 * metrics servers on the test's own address, then the test's own lines.
 */
export function daemonConfigText(serversIP: string, lines: readonly string[]): string {
  return [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    `healthzBindAddress: ${serversIP}:10256`,
    `metricsBindAddress: ${serversIP}:10249`,
    ...lines,
    '',
  ].join('\n');
}
