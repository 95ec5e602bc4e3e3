import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository root, where `--import tsx` resolves. */
export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../main.ts', import.meta.url));

/** A running `userspace-proxy` process (the real bin, run from source through tsx). */
export interface DaemonProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves with the exit code (or the signal name). */
  exited: Promise<number | string>;
}

/** The bin from the build (packages/server/dist/main.js), as users run it. */
const BUILT_MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

/**
 * Spawns the daemon with `args`; `env` is merged over the test's environment. From the sources
 * through tsx, or with `built`, the bin `pnpm build` made (no source condition).
 */
export function spawnDaemon(
  args: string[],
  env: Record<string, string | undefined> = {},
  { built = false }: { built?: boolean } = {},
): DaemonProcess {
  const child = spawn(
    process.execPath,
    built
      ? [BUILT_MAIN, ...args]
      : ['--conditions=@userspace-proxy/source', '--import', 'tsx', MAIN, ...args],
    {
      cwd: REPO_ROOT,
      env: { ...process.env, KUBERNETES_SERVICE_HOST: '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let out = '';
  let err = '';
  child.stdout?.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    err += c.toString();
  });
  const exited = new Promise<number | string>((resolve) => {
    child.on('exit', (code, signal) => resolve(code ?? signal ?? -1));
  });
  return { child, stdout: () => out, stderr: () => err, exited };
}

/** Kills `proc` if it still runs and waits for it: a test's clean-up. */
export async function killDaemon(proc: DaemonProcess | undefined): Promise<void> {
  if (proc && proc.child.exitCode === null && proc.child.signalCode === null) {
    proc.child.kill('SIGKILL');
    await proc.exited;
  }
}
