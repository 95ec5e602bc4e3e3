import { ProxyError } from '@userspace-proxy/core';

/**
 * Why one list was given up on before it completed: the server kept paging past a limit, repeated a
 * continue token, or took too long. The informer treats it like any failed list (it keeps its last
 * known state and retries with back-off); the partial list is dropped, never cached.
 */
export class ListLimitError extends ProxyError {
  /** Which limit: "pages", "items", "bytes", "repeated-continue" or "deadline". */
  readonly limit: 'pages' | 'items' | 'bytes' | 'repeated-continue' | 'deadline';

  constructor(limit: ListLimitError['limit'], message: string) {
    super(limit === 'deadline' ? 'ERR_LIST_DEADLINE' : 'ERR_LIST_LIMIT', message);
    this.limit = limit;
  }
}
