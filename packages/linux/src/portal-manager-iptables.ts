import { networkInterfaces } from 'node:os';
import type { Portal, PortalManager } from '@userspace-proxy/core';
import {
  componentLogger,
  InvalidOptionError,
  type Logger,
  PortalError,
} from '@userspace-proxy/core';
import { type CommandRunner, ExecCommandRunner } from './command-runner.js';
import { CommandError } from './errors.js';
import {
  describePortal as describe,
  type IptablesRule,
  invalidPortalReason,
  portalFamily,
  portalKey,
  portalRules,
  stripPhysdev,
  usesPhysdev,
} from './iptables-rules.js';
import { IptablesRunner } from './iptables-runner.js';

/** The defaults of {@link IptablesPortalManager}. */
export const DEFAULT_IPTABLES_OPTIONS = {
  iptablesCommand: { ipv4: 'iptables', ipv6: 'ip6tables' },
  /** `-w 5`: wait this long for the xtables lock another program (a CNI plugin) holds. */
  lockWaitSeconds: 5,
  /** Jump rules are deleted in a loop; this bounds it when a host has many duplicates. */
  maxJumpRuleDuplicates: 32,
} as const;

/** Options of {@link IptablesPortalManager}. */
export interface IptablesPortalManagerOptions {
  /** Runs iptables. Default: an {@link ExecCommandRunner}. */
  runner?: CommandRunner;
  /** tslog-compatible; default silent. */
  logger?: Logger;
  /**
   * Where this host's own traffic to a Service is DNATed when the proxy listens on every address
   * ("0.0.0.0"/"::"): one address per family. Default: the first non-internal address of the
   * portal's family on this host's interfaces.
   */
  hostIP?: string | readonly string[];
  /** A command for every family ('iptables', 'ip6tables', 'iptables-legacy'…), or one per family. */
  iptablesCommand?: string | { ipv4?: string; ipv6?: string };
  /** Whether the physdev match may be used. Default: tried, and left out if iptables refuses it. */
  physdev?: boolean;
  /** Seconds to wait for the xtables lock. Default 5. */
  lockWaitSeconds?: number;
  /** Flush our chains the first time a family is used, since old proxy ports are stale. Default true. */
  flushOnInit?: boolean;
  /** Injected for tests: node:os `networkInterfaces`. */
  networkInterfaces?: typeof networkInterfaces;
}

interface OpenedPortal {
  command: string;
  rules: IptablesRule[];
}

/**
 * Captures Service traffic with iptables NAT rules in chains it owns (KUBE-PORTALS-*, KUBE-NODEPORT-*),
 * as Linux userspace kube-proxy did. Needs root (CAP_NET_ADMIN) and the iptables tools; IPv6 portals
 * use ip6tables. Operations run one at a time, in call order, so a check and the add that follows
 * it are never interleaved with another portal's.
 */
export class IptablesPortalManager implements PortalManager {
  readonly #ipt: IptablesRunner;
  readonly #log: Logger;
  readonly #hostIPs: readonly string[];
  readonly #commands: { ipv4: string; ipv6: string };
  readonly #flushOnInit: boolean;
  readonly #interfaces: typeof networkInterfaces;
  #physdev: boolean | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  readonly #initialized = new Set<string>();
  readonly #opened = new Map<string, OpenedPortal>();

  constructor(options: IptablesPortalManagerOptions = {}) {
    this.#log = componentLogger(options.logger, 'iptables-portals');
    const hostIP = options.hostIP ?? [];
    this.#hostIPs = typeof hostIP === 'string' ? [hostIP] : hostIP;
    const cmd = options.iptablesCommand ?? DEFAULT_IPTABLES_OPTIONS.iptablesCommand;
    this.#commands =
      typeof cmd === 'string'
        ? { ipv4: cmd, ipv6: cmd }
        : {
            ipv4: cmd.ipv4 ?? DEFAULT_IPTABLES_OPTIONS.iptablesCommand.ipv4,
            ipv6: cmd.ipv6 ?? DEFAULT_IPTABLES_OPTIONS.iptablesCommand.ipv6,
          };
    const wait = options.lockWaitSeconds ?? DEFAULT_IPTABLES_OPTIONS.lockWaitSeconds;
    if (!Number.isInteger(wait) || wait < 0) {
      throw new InvalidOptionError('lockWaitSeconds', `${wait} is not a whole number of seconds`);
    }
    this.#ipt = new IptablesRunner(options.runner ?? new ExecCommandRunner(), wait);
    this.#flushOnInit = options.flushOnInit ?? true;
    this.#physdev = options.physdev;
    this.#interfaces = options.networkInterfaces ?? networkInterfaces;
  }

  /**
   * Creates our chains and jump rules on first use of a family (flushing what an earlier run left),
   * then adds the portal's rules that `-C` does not find. On failure the rules this call added are
   * removed again, so a portal is either fully open or not at all. Rejects with PortalError.
   */
  open(portal: Portal): Promise<void> {
    return this.#serial(() => this.#open(portal));
  }

  /**
   * Deletes the rules `open` installed for this portal (the same ones, even if the host IP changed
   * since); rules already gone are fine. Tries every rule before rejecting with PortalError.
   */
  close(portal: Portal): Promise<void> {
    return this.#serial(() => this.#close(portal));
  }

  /**
   * Deletes the five jump rules (every copy), then flushes and deletes our chains, for IPv4 and IPv6.
   * Anything not there, or a missing ip6tables, is fine; other failures reject with CleanupError after
   * the rest was removed. The next `open` starts from scratch.
   */
  cleanupLeftovers(): Promise<void> {
    return this.#serial(() => this.#cleanup());
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #open(portal: Portal): Promise<void> {
    refuseInvalid(portal, 'open');
    const key = portalKey(portal);
    const known = this.#opened.get(key);
    const added: IptablesRule[] = [];
    let command = '';
    try {
      command = known?.command ?? this.#command(portal);
      await this.#init(command);
      const rules = known?.rules ?? portalRules(portal, this.#ruleOptions(portal));
      const installed: IptablesRule[] = [];
      for (const rule of rules) {
        const { rule: actual, changed } = await this.#withPhysdevFallback(rule, (r) =>
          this.#ipt.ensureRule(command, r, 'append'),
        );
        installed.push(actual);
        if (changed) added.push(actual);
      }
      this.#opened.set(key, { command, rules: installed });
      if (added.length > 0) {
        this.#log.debug(`opened iptables portal for ${describe(portal)}: ${added.length} rule(s)`);
      }
    } catch (error) {
      for (const rule of added.reverse()) {
        await this.#ipt.deleteRule(command, rule).catch((e: unknown) => {
          this.#log.warn(`could not roll back a rule of ${describe(portal)}`, e);
        });
      }
      throw new PortalError(describe(portal), 'open', { cause: error });
    }
  }

  async #close(portal: Portal): Promise<void> {
    refuseInvalid(portal, 'close');
    const key = portalKey(portal);
    const errors: unknown[] = [];
    let opened = this.#opened.get(key);
    if (!opened) {
      try {
        const rules = portalRules(portal, this.#ruleOptions(portal));
        opened = { command: this.#command(portal), rules };
      } catch (error) {
        throw new PortalError(describe(portal), 'close', { cause: error });
      }
    }
    const { command, rules } = opened;
    for (const rule of rules) {
      await this.#withPhysdevFallback(rule, (r) => this.#ipt.deleteRule(command, r)).catch(
        (e: unknown) => errors.push(e),
      );
    }
    this.#opened.delete(key);
    if (errors.length > 0) {
      const cause =
        errors.length === 1 ? errors[0] : new AggregateError(errors, 'rules left behind');
      throw new PortalError(describe(portal), 'close', { cause });
    }
    this.#log.debug(`closed iptables portal for ${describe(portal)}`);
  }

  async #cleanup(): Promise<void> {
    const commands = new Set([this.#commands.ipv4, this.#commands.ipv6]);
    // Whatever happens below, nothing is known to be installed any more: the next open starts over.
    this.#initialized.clear();
    this.#opened.clear();
    await this.#ipt.removeAll(commands, DEFAULT_IPTABLES_OPTIONS.maxJumpRuleDuplicates);
    this.#log.info('removed leftover iptables chains and jump rules');
  }

  /** Creates our chains and jump rules for one iptables command, once (again after a failure). */
  async #init(command: string): Promise<void> {
    if (this.#initialized.has(command)) return;
    await this.#ipt.ensureChains(command, this.#flushOnInit);
    this.#initialized.add(command);
  }

  /**
   * Runs `op` on a rule; when it uses physdev and iptables refuses the match (a namespace or kernel
   * without br_netfilter), remembers that and runs it again without the match.
   */
  async #withPhysdevFallback(
    rule: IptablesRule,
    op: (r: IptablesRule) => Promise<boolean>,
  ): Promise<{ rule: IptablesRule; changed: boolean }> {
    const plain = stripPhysdev(rule);
    if (!usesPhysdev(rule) || this.#physdev === false) {
      return { rule: plain, changed: await op(plain) };
    }
    try {
      return { rule, changed: await op(rule) };
    } catch (error) {
      const output = error instanceof CommandError ? error.output : '';
      if (this.#physdev === true || !/physdev/i.test(output)) throw error;
      this.#physdev = false;
      this.#log.warn(
        'the iptables physdev match is unavailable; external-IP rules will also match bridged traffic',
      );
      return { rule: plain, changed: await op(plain) };
    }
  }

  #command(portal: Portal): string {
    return portalFamily(portal) === 'IPv6' ? this.#commands.ipv6 : this.#commands.ipv4;
  }

  #ruleOptions(portal: Portal): { hostIP: string; physdev: boolean } {
    return { hostIP: this.#hostIP(portalFamily(portal)), physdev: this.#physdev !== false };
  }

  #hostIP(family: 'IPv4' | 'IPv6'): string {
    const v6 = family === 'IPv6';
    const given = this.#hostIPs.find((ip) => ip.includes(':') === v6);
    if (given !== undefined) return given;
    for (const infos of Object.values(this.#interfaces())) {
      for (const info of infos ?? []) {
        if (info.internal || info.family !== family) continue;
        if (v6 && info.address.toLowerCase().startsWith('fe80:')) continue;
        return info.address;
      }
    }
    throw new InvalidOptionError('hostIP', `no ${family} address found on this host; pass hostIP`);
  }
}

/** A portal comes from Service objects: a malformed one is refused before anything runs. */
function refuseInvalid(portal: Portal, action: 'open' | 'close'): void {
  const invalid = invalidPortalReason(portal);
  if (invalid !== undefined) {
    throw new PortalError(describe(portal), action, {
      cause: new InvalidOptionError('portal', invalid),
    });
  }
}
