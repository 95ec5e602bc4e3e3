import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/** What {@link buildNativeHelper} compiles, and with what. */
export interface NativeHelperBuild {
  /** The C source file. */
  readonly source: string;
  /** Where binaries go (made when missing); one file per source version. */
  readonly outDir: string;
  /** The binary's name before its hash, e.g. `tcp-relay-helper`. */
  readonly name: string;
  /** The C compiler. Default `cc`. */
  readonly compiler?: string;
  /** Compiler flags before `-o`. Default `['-O2']`. */
  readonly flags?: readonly string[];
}

const builds = new Map<string, Promise<string>>();

/**
 * Compiles a helper program once per source version and resolves with the binary's path. Proxy
 * sockets that need what Node 20 lacks (raw IP sockets, splice(2)) run a small C program of their
 * own as a child process instead of an addon: nothing to build at install (pnpm blocks dependency
 * build scripts), no node-gyp or Node headers, and a fault in C cannot take the proxy down. The
 * file name carries a hash of the source and flags, so an edited source is rebuilt; the build goes
 * to a temporary name renamed into place, so concurrent builds (two processes, two factories)
 * never run half a binary. Concurrent calls in one process share one compiler run.
 * Rejects with an Error whose message carries the compiler's output (truncated) when the build
 * fails; the caller wraps it in its own coded error.
 */
export function buildNativeHelper(build: NativeHelperBuild): Promise<string> {
  const compiler = build.compiler ?? 'cc';
  const flags = build.flags ?? ['-O2'];
  let source: Buffer;
  try {
    source = readFileSync(build.source);
  } catch (cause) {
    return Promise.reject(new Error(`cannot read ${build.source}`, { cause }));
  }
  const hash = createHash('sha256')
    .update(source)
    .update(flags.join('\0'))
    .digest('hex')
    .slice(0, 12);
  const out = join(build.outDir, `${build.name}-${hash}`);
  let p = builds.get(out);
  if (p !== undefined) return p;
  p = new Promise<string>((resolve, reject) => {
    if (existsSync(out)) {
      resolve(out);
      return;
    }
    const tmp = `${out}.${randomBytes(4).toString('hex')}.tmp`;
    try {
      mkdirSync(build.outDir, { recursive: true, mode: 0o755 });
    } catch (cause) {
      reject(new Error(`cannot create ${build.outDir}; give a prebuilt helper path`, { cause }));
      return;
    }
    execFile(
      compiler,
      [...flags, '-o', tmp, build.source],
      { timeout: 60_000 },
      (err, _o, stderr) => {
        if (err) {
          rmSync(tmp, { force: true });
          reject(
            new Error(
              `building with ${compiler} failed (${err.message.slice(0, 200)}): ${String(stderr).slice(0, 500)}`,
              { cause: err },
            ),
          );
          return;
        }
        try {
          renameSync(tmp, out);
        } catch (cause) {
          rmSync(tmp, { force: true });
          reject(new Error(`cannot move the build into ${out}`, { cause }));
          return;
        }
        resolve(out);
      },
    );
  });
  builds.set(out, p);
  p.catch(() => builds.delete(out));
  return p;
}
