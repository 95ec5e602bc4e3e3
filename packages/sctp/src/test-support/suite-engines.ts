/**
 * The engines the engine suite (engine-suite.test.ts) runs, and what each is expected to do: a test
 * listed for an engine as `fail` runs as `it.fails`, so the suite proves the failure the findings
 * measured and turns red the day a new version of the package passes it (then move the engine's
 * entry, and docs/sctp.md "Why our own engine"). `flaky` runs and reports without asserting; `skip`
 * is for what cannot run in the test process at all.
 */
import { spawnSync } from 'node:child_process';
import {
  createUserspaceSctpEngine,
  type SctpAssociationOptions,
  type SctpEngine,
} from '../index.js';
import { ForeignSctpEngine } from './engine-foreign.js';
import { npmSctpStack } from './engine-npm-sctp.js';
import { weriftStack } from './engine-werift.js';

/** Short timers for our engine (RTO from 100 ms, SACK delay 20 ms), so faults recover in milliseconds. */
export const FAST: SctpAssociationOptions = {
  rtoInitial: 100,
  rtoMin: 50,
  rtoMax: 400,
  sackDelay: 20,
  maxRetransmits: 12,
};

/** What a test is expected to do on one engine. */
export interface Expectation {
  readonly kind: 'fail' | 'flaky' | 'skip';
  readonly reason: string;
}

/** One engine of the suite. */
export interface SuiteEngine {
  readonly name: string;
  /** A fresh engine (each side of a test gets its own). */
  make(options?: SctpAssociationOptions): SctpEngine;
  /** Test id → expectation; absent ids must pass. */
  readonly expected: Readonly<Record<string, Expectation>>;
  /** Run the tests concurrently (engines whose expected failures wait for deadlines). */
  readonly concurrent: boolean;
  /**
   * Share of unordered messages in the fault tests (default 0.2). npm `sctp` stalls on unordered
   * messages without any fault (test `unordered-mix`), so its fault tests send ordered ones only and
   * measure the faults themselves.
   */
  readonly faultUnordered?: number;
}

const fail = (reason: string): Expectation => ({ kind: 'fail', reason });
const flaky = (reason: string): Expectation => ({ kind: 'flaky', reason });

const NO_U_BIT = fail('receive side does not expose the U bit');
const WERIFT_NO_SHUTDOWN = fail('no graceful shutdown: stop() sends ABORT');
const WERIFT_SHUTDOWN_LEAK = fail(
  "after a peer's SHUTDOWN it goes to SHUTDOWN-SENT, ignores SHUTDOWN COMPLETE, never closes",
);
const WERIFT_HOL = fail(
  'a lost DATA while other streams go on: later messages of its stream are never delivered',
);
const LOST_ON_ERROR = (what: string): Expectation =>
  fail(`${what} throws inside the stack: contained, but the association is lost`);

const weriftCommon: Record<string, Expectation> = {
  messages: NO_U_BIT,
  shutdown: WERIFT_NO_SHUTDOWN,
  'peer-shutdown': WERIFT_SHUTDOWN_LEAK,
  'drop-DATA': WERIFT_HOL,
  'drop-DATA-s2c': WERIFT_HOL,
  'drop-SHUTDOWN': WERIFT_NO_SHUTDOWN,
  'drop-SHUTDOWN-ACK': WERIFT_NO_SHUTDOWN,
  'drop-SHUTDOWN-COMPLETE': WERIFT_NO_SHUTDOWN,
  'loss-5': WERIFT_HOL,
  chaos: WERIFT_HOL,
  'dead-path': fail(
    'fixed RTO constants (1 s min, 10 retransmits with back-off): minutes, not 10 s',
  ),
  'connect-nothing': fail('T1-init never backs off from its fixed 3 s: 9 INITs take 27 s'),
  'usrsctp-echo-server': WERIFT_NO_SHUTDOWN,
  'usrsctp-client': WERIFT_SHUTDOWN_LEAK,
};

const NPM_NO_COOKIE_RTX = fail('COOKIE ECHO is never retransmitted: never connects');
const npmCommon: Record<string, Expectation> = {
  messages: NO_U_BIT,
  'many-large': fail(
    'stalls on the 300 000-byte message (larger messages than ~200 KiB, findings §1)',
  ),
  'drop-COOKIE-ECHO': NPM_NO_COOKIE_RTX,
  'drop-COOKIE-ACK': NPM_NO_COOKIE_RTX,
  'drop-DATA-s2c': fail('one message of the lost packet is never delivered'),
  'drop-SACK': fail('one message of the other direction is never delivered'),
  'drop-SHUTDOWN': fail('SHUTDOWN is never retransmitted: neither side closes'),
  'drop-SHUTDOWN-COMPLETE': fail('the SHUTDOWN ACK sender never closes'),
  'loss-1': flaky('stalls in some runs (findings: 1 of 3)'),
  'loss-5': flaky('messages lost in some runs (70 % delivered), all in others'),
  'unordered-mix': fail('an unordered message stalls the delivery of later messages'),
  chaos: flaky(
    'messages lost under reordering and duplication in most runs, all delivered in some',
  ),
  'dead-path': fail('never reports the dead path within 10 s'),
  'connect-nothing': fail('INIT every 3 s without back-off, then nothing: connect never fails'),
  'usrsctp-client': fail(
    "3 of 10 echoes: one SEND at a time (~1 ms each), the rest still queued when the client's SHUTDOWN comes",
  ),
};

/** A C compiler for the UDP helper (`udpIo: 'helper'`); without one its entry is left out. */
export const HAS_CC = spawnSync('cc', ['--version']).status === 0;

/** Every engine tried. */
export const SUITE_ENGINES: readonly SuiteEngine[] = [
  {
    name: 'userspace (ours)',
    make: (o) => createUserspaceSctpEngine({ association: { ...FAST, ...o } }),
    expected: {},
    concurrent: false,
  },
  ...(HAS_CC
    ? [
        {
          name: "userspace (ours), udpIo: 'helper'",
          make: (o?: SctpAssociationOptions) =>
            createUserspaceSctpEngine({ udpIo: 'helper', association: { ...FAST, ...o } }),
          expected: {},
          concurrent: false,
        },
      ]
    : []),
  {
    name: 'werift-sctp 0.0.11, guarded',
    make: () => new ForeignSctpEngine(weriftStack),
    expected: weriftCommon,
    concurrent: true,
  },
  {
    name: 'werift-sctp 0.0.11, unguarded',
    make: () => new ForeignSctpEngine(weriftStack, { guard: false }),
    expected: {
      ...weriftCommon,
      'bad-crc': LOST_ON_ERROR('a bad checksum'),
      'corrupt-data': LOST_ON_ERROR('a bad checksum'),
      'crafted-abort': {
        kind: 'skip',
        reason:
          'measured: an ABORT with a zero-length cause runs the heap out (the guard drops it)',
      },
      'short-auth': LOST_ON_ERROR('a truncated AUTH chunk'),
      'short-forward-tsn': LOST_ON_ERROR('a truncated FORWARD TSN chunk'),
    },
    concurrent: true,
  },
  {
    name: 'sctp 1.0.0, guarded',
    make: () => new ForeignSctpEngine(npmSctpStack),
    expected: npmCommon,
    concurrent: true,
    faultUnordered: 0,
  },
  {
    name: 'sctp 1.0.0, unguarded',
    make: () => new ForeignSctpEngine(npmSctpStack, { guard: false }),
    faultUnordered: 0,
    expected: {
      ...npmCommon,
      'corrupt-data': fail('the CRC32c is never enforced: the corrupted message is delivered'),
      'short-auth': LOST_ON_ERROR('a truncated AUTH chunk'),
      'short-forward-tsn': LOST_ON_ERROR('a truncated FORWARD TSN chunk'),
      'crafted-abort': {
        kind: 'skip',
        reason: 'an ABORT with a zero-length cause loops until the heap is gone (findings §1)',
      },
    },
    concurrent: true,
  },
];
