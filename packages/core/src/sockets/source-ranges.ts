import { BlockList, isIP } from 'node:net';

/**
 * A check of a client address against `loadBalancerSourceRanges`-style CIDRs ("10.0.0.0/8",
 * spaces around allowed, as kube-proxy trims them): undefined when there are none (every client is
 * allowed, as in Kubernetes), else a function that is true for an allowed address. An IPv4-mapped
 * IPv6 client (what a dual-stack listener reports) is checked as its IPv4 address. Entries that are
 * not CIDRs are ignored (validation refuses them), so a bad entry never opens the ranges up: with
 * only bad entries nobody is allowed.
 */
export function sourceRangeCheck(
  ranges: readonly string[] | undefined,
): ((address: string | undefined) => boolean) | undefined {
  if (ranges === undefined || ranges.length === 0) return undefined;
  const allowed = new BlockList();
  for (const range of ranges) {
    const text = range.trim();
    const slash = text.indexOf('/');
    const family = slash < 0 ? 0 : isIP(text.slice(0, slash));
    const prefix = Number(text.slice(slash + 1));
    if (
      family === 0 ||
      !Number.isInteger(prefix) ||
      prefix < 0 ||
      prefix > (family === 4 ? 32 : 128)
    )
      continue;
    allowed.addSubnet(text.slice(0, slash), prefix, family === 4 ? 'ipv4' : 'ipv6');
  }
  return (address) => {
    if (address === undefined) return false;
    const mapped = address.startsWith('::ffff:') ? address.slice(7) : address;
    const family = isIP(mapped);
    if (family === 0) return false;
    return allowed.check(mapped, family === 4 ? 'ipv4' : 'ipv6');
  };
}
