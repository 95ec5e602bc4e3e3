import {
  type CommandResult,
  type CommandRunner,
  commandOutput,
  formatCommand,
  isCommandNotFound,
} from './command-runner.js';
import { CleanupError, CommandError } from './errors.js';
import {
  type IptablesRule,
  isIptablesNotFound,
  isIptablesUnavailable,
  JUMP_RULES,
  OWNED_CHAINS,
} from './iptables-rules.js';

/**
 * The iptables operations the portal manager is built from, for one `iptables`-like command at a
 * time: check-then-add a rule, delete a rule ("not there" is fine), create our chains and jump rules,
 * and remove everything of ours. Every call passes `-w` so a CNI plugin holding the xtables lock
 * delays us instead of failing us. Kept apart from IptablesPortalManager, which decides which
 * rules a portal needs and remembers what it installed.
 */
export class IptablesRunner {
  readonly #runner: CommandRunner;
  readonly #lockWait: string;

  /** `lockWaitSeconds` is passed as `-w`; the caller has checked it. */
  constructor(runner: CommandRunner, lockWaitSeconds: number) {
    this.#runner = runner;
    this.#lockWait = String(lockWaitSeconds);
  }

  /**
   * Creates our chains (an existing one is fine), flushes them when `flush` (proxy ports of an
   * earlier run are stale), and adds the five jump rules unless `-C` finds them.
   * @throws CommandError
   */
  async ensureChains(command: string, flush: boolean): Promise<void> {
    for (const { table, chain } of OWNED_CHAINS) {
      const owned = { table, chain, args: [] };
      const r = await this.#ipt(command, '-N', owned);
      if (r.code !== 0 && !/already exists/i.test(commandOutput(r))) {
        throw this.#failure(command, '-N', owned, r);
      }
      if (flush) await this.#must(command, '-F', owned);
    }
    for (const jump of JUMP_RULES) await this.ensureRule(command, jump, jump.position);
  }

  /**
   * Adds a rule unless `-C` finds it; resolves with whether it was added.
   * @throws CommandError
   */
  async ensureRule(
    command: string,
    rule: IptablesRule,
    position: 'prepend' | 'append',
  ): Promise<boolean> {
    const check = await this.#ipt(command, '-C', rule);
    if (check.code === 0) return false;
    if (check.code !== 1 || isCommandNotFound(check)) {
      throw this.#failure(command, '-C', rule, check);
    }
    if (position === 'prepend') {
      await this.#must(command, '-I', { ...rule, args: ['1', ...rule.args] });
    } else {
      await this.#must(command, '-A', rule);
    }
    return true;
  }

  /**
   * Deletes a rule; "not there" is success. Resolves with whether it was there.
   * @throws CommandError
   */
  async deleteRule(command: string, rule: IptablesRule): Promise<boolean> {
    const r = await this.#ipt(command, '-D', rule);
    if (r.code === 0) return true;
    if (isIptablesNotFound(r)) return false;
    throw this.#failure(command, '-D', rule, r);
  }

  /**
   * Deletes every copy of the jump rules (at most `maxDuplicates` each), then flushes and deletes our
   * chains, for each command. Anything not there, a missing program or a missing table is fine;
   * other failures are collected and reported together once the rest is removed.
   * @throws CleanupError
   */
  async removeAll(commands: Iterable<string>, maxDuplicates: number): Promise<void> {
    const errors: unknown[] = [];
    const report = (command: string, op: string, rule: IptablesRule, r: CommandResult): boolean => {
      if (r.code === 0 || isIptablesNotFound(r) || isIptablesUnavailable(r)) return r.code === 0;
      errors.push(this.#failure(command, op, rule, r));
      return false;
    };
    for (const command of commands) {
      for (const jump of JUMP_RULES) {
        // A crashed older proxy may have added a jump more than once; delete until none is left.
        for (let i = 0; i < maxDuplicates; i++) {
          if (!report(command, '-D', jump, await this.#ipt(command, '-D', jump))) break;
        }
      }
      for (const { table, chain } of OWNED_CHAINS) {
        const owned = { table, chain, args: [] };
        if (report(command, '-F', owned, await this.#ipt(command, '-F', owned))) {
          report(command, '-X', owned, await this.#ipt(command, '-X', owned));
        }
      }
    }
    if (errors.length > 0) {
      const cause =
        errors.length === 1 ? errors[0] : new AggregateError(errors, `${errors.length} failures`);
      throw new CleanupError('iptables chains and jump rules', { cause });
    }
  }

  #argv(op: string, rule: IptablesRule): string[] {
    return ['-w', this.#lockWait, '-t', rule.table, op, rule.chain, ...rule.args];
  }

  #ipt(command: string, op: string, rule: IptablesRule): Promise<CommandResult> {
    return this.#runner.run(command, this.#argv(op, rule));
  }

  async #must(command: string, op: string, rule: IptablesRule): Promise<void> {
    const r = await this.#ipt(command, op, rule);
    if (r.code !== 0) throw this.#failure(command, op, rule, r);
  }

  #failure(command: string, op: string, rule: IptablesRule, r: CommandResult): CommandError {
    const hint = isCommandNotFound(r) ? ' (install iptables)' : '';
    const cmdline = formatCommand(command, this.#argv(op, rule));
    return new CommandError(cmdline, `exit ${r.code}${hint}: ${commandOutput(r)}`);
  }
}
