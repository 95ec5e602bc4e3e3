import { describe, expect, it } from 'vitest';
import {
  type CommandRunner,
  commandOutput,
  ExecCommandRunner,
  formatCommand,
  isCommandNotFound,
  prefixedCommandRunner,
} from './command-runner.js';
import { CommandError } from './errors.js';

const node = process.execPath;

describe('ExecCommandRunner', () => {
  const runner = new ExecCommandRunner();

  it('resolves with the exit code and both outputs, non-zero included', async () => {
    const r = await runner.run(node, [
      '-e',
      'process.stdout.write("out"); process.stderr.write("err"); process.exit(3)',
    ]);
    expect(r).toEqual({ code: 3, stdout: 'out', stderr: 'err' });
    expect(await runner.run(node, ['-e', 'console.log(1)'])).toEqual({
      code: 0,
      stdout: '1\n',
      stderr: '',
    });
  });

  it('passes arguments verbatim, with no shell in between', async () => {
    const r = await runner.run(node, ['-e', 'console.log(process.argv[1])', '$(echo hi); `x` "y"']);
    expect(r.stdout).toBe('$(echo hi); `x` "y"\n');
  });

  it('reports a missing program as code 127, "command not found"', async () => {
    const r = await runner.run('definitely-not-a-program-x1', ['a']);
    expect(r.code).toBe(127);
    expect(isCommandNotFound(r)).toBe(true);
  });

  it('rejects with CommandError when a command outlives its timeout', async () => {
    const short = new ExecCommandRunner({ timeoutMs: 200 });
    const error = await short.run(node, ['-e', 'setTimeout(() => {}, 60000)']).catch((e) => e);
    expect(error).toBeInstanceOf(CommandError);
    expect((error as Error).message).toMatch(/timed out after 200 ms/);
  });

  it('rejects with CommandError when output exceeds the buffer', async () => {
    const small = new ExecCommandRunner({ maxBufferBytes: 1024 });
    await expect(
      small.run(node, ['-e', 'process.stdout.write("x".repeat(100000))']),
    ).rejects.toThrow(/printed more than 1024 bytes/);
  });

  it('runs with LC_ALL=C by default, so that messages are parseable', async () => {
    const r = await runner.run(node, ['-e', 'console.log(process.env.LC_ALL)']);
    expect(r.stdout).toBe('C\n');
  });
});

describe('prefixedCommandRunner', () => {
  it('puts the prefix before every command', async () => {
    const calls: string[][] = [];
    const inner: CommandRunner = {
      run: async (cmd, args) => {
        calls.push([cmd, ...args]);
        return { code: 0, stdout: '', stderr: '' };
      },
    };
    await prefixedCommandRunner(['ip', 'netns', 'exec', 'ns1'], inner).run('iptables', ['-L']);
    await prefixedCommandRunner([], inner).run('iptables', ['-S']);
    expect(calls).toEqual([
      ['ip', 'netns', 'exec', 'ns1', 'iptables', '-L'],
      ['iptables', '-S'],
    ]);
  });
});

describe('helpers', () => {
  it('recognises "not found" from ip netns exec', () => {
    expect(
      isCommandNotFound({
        code: 255,
        stdout: '',
        stderr: 'exec of "conntrack" failed: No such file or directory',
      }),
    ).toBe(true);
    expect(isCommandNotFound({ code: 1, stdout: '', stderr: 'No such file or directory' })).toBe(
      false,
    );
  });

  it('formats commands and output for messages', () => {
    expect(formatCommand('iptables', ['-m', 'comment', '--comment', 'a b', ''])).toBe(
      'iptables -m comment --comment "a b" ""',
    );
    expect(commandOutput({ code: 1, stdout: 'a\n', stderr: 'b\n' })).toBe('a\n\nb');
    expect(commandOutput({ code: 1, stdout: '', stderr: 'b\n' })).toBe('b');
  });
});
