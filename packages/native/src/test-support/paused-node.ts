/**
 * A helper whose output Node stops reading, as a GC pause or a long sync would: the helper runs
 * behind `| cat`, and stopping that cat (SIGSTOP) fills the helper's stdout pipe while the test's
 * own Node keeps running. Extra arguments (`--out-max`) reach the helper.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The wrapper's path, and how to stop and resume the reader of the helper running behind it. */
export interface PausableHelper {
  readonly path: string;
  /** Stops reading the output of the helper started by the shell `pid` (helperPid()). */
  pause(pid: number): void;
  /** Reads it again. */
  resume(): void;
  /** Resumes and removes the wrapper. */
  remove(): void;
}

/** A wrapper around the helper binary `real` (shell-quoted with its arguments). */
export function pausableHelper(real: string, args: readonly string[] = []): PausableHelper {
  const dir = mkdtempSync(join(tmpdir(), 'paused-node-'));
  const path = join(dir, 'helper.sh');
  const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;
  writeFileSync(path, `#!/bin/sh\n${[real, ...args].map(quote).join(' ')} "$@" | cat\n`);
  chmodSync(path, 0o755);
  let stopped: number | undefined;
  const resume = (): void => {
    if (stopped === undefined) return;
    try {
      process.kill(stopped, 'SIGCONT');
    } catch {
      // gone already
    }
    stopped = undefined;
  };
  return {
    path,
    pause(pid: number): void {
      const cat = Number(
        execFileSync('pgrep', ['-P', String(pid), '-x', 'cat'])
          .toString()
          .trim(),
      );
      process.kill(cat, 'SIGSTOP');
      stopped = cat;
    },
    resume,
    remove(): void {
      resume();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
