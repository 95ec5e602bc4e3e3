import { ProxyError } from '@userspace-proxy/core';

/** The helper could not be built, started, or it died: `detail` says which. */
export class NativeHelperError extends ProxyError {
  constructor(detail: string, options?: { cause?: unknown; protocol?: 'TCP' | 'UDP' }) {
    super('ERR_NATIVE_HELPER', `native ${options?.protocol ?? 'TCP'} helper: ${detail}`, options);
  }
}

/**
 * An option or Service feature the native data path does not implement (an accept policy, the
 * PROXY protocol header): refused when the socket is opened, naming it, rather than ignored.
 */
export class NativeUnsupportedError extends ProxyError {
  /** The option or annotation refused. */
  readonly option: string;
  constructor(option: string, reason: string, protocol: 'TCP' | 'UDP' = 'TCP') {
    super(
      'ERR_NATIVE_UNSUPPORTED',
      `the native ${protocol} data path does not support ${option}: ${reason}`,
    );
    this.option = option;
  }
}

/**
 * A system call of the helper failed with `errno` (listen's EADDRINUSE, a dial's ECONNREFUSED):
 * shaped as Node's own errors (`code` is the errno name, `syscall` the call), so code that tells a
 * port conflict by `cause.code === 'EADDRINUSE'` or a local shortage by `code === 'EMFILE'` works
 * with the native socket unchanged.
 */
export function errnoError(syscall: string, errno: string, detail: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`${syscall} ${errno} ${detail}`);
  error.code = errno;
  error.syscall = syscall;
  return error;
}
