/** The little of npm `sctp` 1.0.0 (plain JavaScript, no types) that engine-npm-sctp.ts uses. */
declare module 'sctp' {
  import type { EventEmitter } from 'node:events';
  import type { Duplex, Readable } from 'node:stream';

  interface NpmSctpAssociation extends EventEmitter {
    SEND(
      data: Buffer,
      options: { stream_id: number; ppid: number; unordered: boolean },
      callback: (error?: Error) => void,
    ): boolean;
    SHUTDOWN(callback?: () => void): void;
    ABORT(reason?: string): void;
  }

  class Socket extends Duplex {
    constructor(options: Record<string, unknown>);
    connect(options: Record<string, unknown>): void;
    association: NpmSctpAssociation | undefined;
    OS: number;
    MIS: number;
    on(event: 'stream', listener: (stream: Readable, streamId: number) => void): this;
    on(event: string, listener: (...args: never[]) => void): this;
  }

  function defaults(params: Record<string, unknown>): Record<string, unknown>;
}
