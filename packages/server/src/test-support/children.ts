import { execFileSync } from 'node:child_process';

/** The command lines of this process's children (a native helper among them), for tests. */
export function childCommandLines(): string[] {
  try {
    return execFileSync('ps', ['-o', 'args=', '--ppid', String(process.pid)], { encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() !== '');
  } catch {
    return []; // ps exits 1 when there is no child
  }
}
