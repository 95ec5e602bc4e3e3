import { isIP, SocketAddress } from 'node:net';
import type { AddressManager } from '@userspace-proxy/core';
import { componentLogger, InvalidOptionError, type Logger } from '@userspace-proxy/core';
import {
  type CommandResult,
  type CommandRunner,
  commandOutput,
  ExecCommandRunner,
  formatCommand,
  isCommandNotFound,
} from './command-runner.js';
import { CommandError } from './errors.js';

/** Options of {@link IpAddressManager}. */
export interface IpAddressManagerOptions {
  /** Runs `ip` (iproute2). Default: an {@link ExecCommandRunner}. */
  runner?: CommandRunner;
  /** The interface Service addresses are added to, e.g. "lo" or a veth. Required. */
  interface: string;
  /** tslog-compatible; default silent. */
  logger?: Logger;
  /** The program. Default "ip", found on PATH. */
  ipCommand?: string;
}

/** Linux interface names: 1–15 bytes, no slash, colon or whitespace. */
const IFACE = /^[^\s/:]{1,15}$/;

/** The canonical text of an IP, so that "FD00::0001" and "fd00::1" compare equal. */
function canonical(ip: string): string {
  const family = isIP(ip);
  if (family === 0) return ip;
  return new SocketAddress({ address: ip, family: family === 6 ? 'ipv6' : 'ipv4' }).address;
}

/** The addresses in `ip -o addr show` output, canonical, without their prefix lengths. */
export function parseIpAddrShow(output: string): Set<string> {
  const found = new Set<string>();
  for (const match of output.matchAll(/\sinet6?\s+([0-9A-Fa-f:.]+)\/\d+/g)) {
    if (match[1] !== undefined) found.add(canonical(match[1]));
  }
  return found;
}

/**
 * Makes Service addresses bindable in ServicePortPortal mode by adding them to a host interface with
 * `ip addr add IP/32 dev IFACE` (`/128 nodad` for IPv6, so that the address is usable at once rather
 * than after duplicate-address detection). It removes only what it added, so an address an operator
 * configured stays. Needs root (CAP_NET_ADMIN) and iproute2. Operations run one at a time.
 */
export class IpAddressManager implements AddressManager {
  readonly #runner: CommandRunner;
  readonly #log: Logger;
  readonly #iface: string;
  readonly #ip: string;
  readonly #added = new Set<string>();
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: IpAddressManagerOptions) {
    const iface = options?.interface;
    if (typeof iface !== 'string' || !IFACE.test(iface)) {
      throw new InvalidOptionError('interface', `"${String(iface)}" is not an interface name`);
    }
    this.#iface = iface;
    this.#runner = options.runner ?? new ExecCommandRunner();
    this.#log = componentLogger(options.logger, 'ip-addresses');
    this.#ip = options.ipCommand ?? 'ip';
  }

  /** The addresses this manager added and has not removed yet, canonical. */
  added(): string[] {
    return [...this.#added];
  }

  ensureAddress(ip: string): Promise<void> {
    return this.#serial(async () => {
      const addr = this.#validate(ip);
      const present = await this.#present();
      if (present.has(addr)) return;
      const args = ['addr', 'add', ...this.#spec(addr, true)];
      const r = await this.#runner.run(this.#ip, args);
      if (r.code !== 0) {
        // Someone else added it between our look and our add: it is bindable, but not ours.
        if (/File exists/i.test(commandOutput(r))) return;
        throw this.#failure(args, r);
      }
      this.#added.add(addr);
      this.#log.info(`added ${addr} to ${this.#iface}`);
    });
  }

  removeAddress(ip: string): Promise<void> {
    return this.#serial(async () => {
      const addr = this.#validate(ip);
      if (!this.#added.has(addr)) return;
      const args = ['addr', 'del', ...this.#spec(addr, false)];
      const r = await this.#runner.run(this.#ip, args);
      // "Cannot assign requested address": someone removed it already, which is what we wanted.
      if (r.code !== 0 && !/Cannot assign requested address/i.test(commandOutput(r))) {
        throw this.#failure(args, r);
      }
      this.#added.delete(addr);
      this.#log.info(`removed ${addr} from ${this.#iface}`);
    });
  }

  #serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.#queue.then(fn, fn);
    this.#queue = run.catch(() => undefined);
    return run;
  }

  #validate(ip: string): string {
    if (typeof ip !== 'string' || isIP(ip) === 0) {
      throw new InvalidOptionError('ip', `"${String(ip)}" is not an IP address`);
    }
    return canonical(ip);
  }

  #spec(addr: string, add: boolean): string[] {
    if (isIP(addr) !== 6) return [`${addr}/32`, 'dev', this.#iface];
    return add ? [`${addr}/128`, 'dev', this.#iface, 'nodad'] : [`${addr}/128`, 'dev', this.#iface];
  }

  async #present(): Promise<Set<string>> {
    const args = ['-o', 'addr', 'show', 'dev', this.#iface];
    const r = await this.#runner.run(this.#ip, args);
    if (r.code !== 0) throw this.#failure(args, r);
    return parseIpAddrShow(r.stdout);
  }

  #failure(args: readonly string[], r: CommandResult): CommandError {
    const hint = isCommandNotFound(r) ? ' (install iproute2)' : '';
    return new CommandError(
      formatCommand(this.#ip, args),
      `exit ${r.code}${hint}: ${commandOutput(r)}`,
    );
  }
}
