import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { ProxyError } from '@userspace-proxy/core';
import { logSafe } from './log-safe.js';

/**
 * Reading a whole file the user names (the configuration file, the services manifest) without
 * letting the path decide how much the daemon reads or whether it returns at all. `readFile` on a
 * FIFO blocks a libuv thread until someone writes; on /dev/zero or /dev/urandom it reads until the
 * heap is gone; on a file that grows while it is read it follows the growth. So the path must name a
 * regular file (a symlink to one is fine), its size is checked before reading, it is opened
 * non-blocking (a FIFO swapped in after the check cannot hang the open) and checked again on the open
 * descriptor, and at most one byte over the limit is ever read.
 */

/** The largest configuration file read (kube-proxy's are a few KiB); a larger one is an error. */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

/** The path names something other than a regular file (a FIFO, a device, a directory, a socket). */
export class NotRegularFileError extends ProxyError {
  constructor(path: string, what: string) {
    super(
      'ERR_NOT_REGULAR_FILE',
      `${logSafe(path, 256)} is ${what}, not a regular file; it was not read`,
    );
  }
}

/** The file is larger than the limit for its kind; nothing of it was used. */
export class FileTooLargeError extends ProxyError {
  /** The size seen: the file's size, or more than the limit when it grew while being read. */
  readonly size: number;
  readonly limit: number;
  constructor(message: string, size: number, limit: number) {
    super('ERR_FILE_TOO_LARGE', message);
    this.size = size;
    this.limit = limit;
  }
}

/** Options of {@link readBoundedFile}. */
export interface BoundedReadOptions {
  /** The most bytes accepted. */
  maxBytes: number;
  /** The message of a file over the limit; default one naming the path and both sizes. */
  tooLarge?: (size: number) => string;
}

/** What a non-regular file is, in words, for the error. */
function describeKind(info: {
  isDirectory(): boolean;
  isFIFO(): boolean;
  isCharacterDevice(): boolean;
  isBlockDevice(): boolean;
  isSocket(): boolean;
}): string {
  if (info.isDirectory()) return 'a directory';
  if (info.isFIFO()) return 'a FIFO';
  if (info.isCharacterDevice()) return 'a character device';
  if (info.isBlockDevice()) return 'a block device';
  if (info.isSocket()) return 'a socket';
  return 'not a regular file';
}

/**
 * The file at `path` as UTF-8, when it is a regular file of at most `maxBytes` bytes.
 * @throws NotRegularFileError (`ERR_NOT_REGULAR_FILE`) or FileTooLargeError (`ERR_FILE_TOO_LARGE`);
 *   the file system's own errors (ENOENT, EACCES) as they are.
 */
export async function readBoundedFile(path: string, options: BoundedReadOptions): Promise<string> {
  const { maxBytes } = options;
  const tooLarge = (size: number) =>
    new FileTooLargeError(
      options.tooLarge?.(size) ??
        `${logSafe(path, 256)} is ${size} bytes, larger than the limit of ${maxBytes} bytes; it was not read`,
      size,
      maxBytes,
    );
  const check = (info: Awaited<ReturnType<typeof stat>>) => {
    if (!info.isFile()) throw new NotRegularFileError(path, describeKind(info));
    if (Number(info.size) > maxBytes) throw tooLarge(Number(info.size));
  };
  check(await stat(path));
  const handle = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    // The path may have been replaced between stat and open: what was opened is what counts.
    check(await handle.stat());
    const buffer = Buffer.allocUnsafe(maxBytes + 1);
    let filled = 0;
    while (filled < buffer.length) {
      const { bytesRead } = await handle.read(buffer, filled, buffer.length - filled, filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    if (filled > maxBytes) throw tooLarge(filled);
    return buffer.toString('utf8', 0, filled);
  } finally {
    await handle.close();
  }
}
