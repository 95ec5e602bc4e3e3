/**
 * usrsctp's example programs (Debian `libusrsctp-examples`) as interop peers. Tests that need them
 * skip with {@link usrsctpMissing} as the reason when they are not installed.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';

/** Where Debian installs them. */
export const USRSCTP_DIR = process.env.USRSCTP_DIR ?? '/usr/lib/usrsctp';

const needed = ['echo_server', 'client', 'tsctp'];

/** Undefined when the programs are there, otherwise why the interop tests skip. */
export const usrsctpMissing: string | undefined = needed.every((p) =>
  existsSync(`${USRSCTP_DIR}/${p}`),
)
  ? undefined
  : `usrsctp examples not found in ${USRSCTP_DIR} (apt-get install libusrsctp-examples)`;

/** A running usrsctp program with its collected output. */
export interface Peer {
  readonly child: ChildProcess;
  stdout: string;
  readonly exited: Promise<number | null>;
  kill(): void;
}

const running = new Set<Peer>();

/** Starts one program; {@link killAll} in afterEach stops what a failed test left behind. */
export function startPeer(program: string, args: string[], stdin = false): Peer {
  const child = spawn(`${USRSCTP_DIR}/${program}`, args, {
    stdio: [stdin ? 'pipe' : 'ignore', 'pipe', 'pipe'],
  });
  const peer: Peer = {
    child,
    stdout: '',
    exited: new Promise((resolve) => child.once('exit', (code) => resolve(code))),
    kill: () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
  };
  child.stdout?.on('data', (d: Buffer) => {
    peer.stdout += d.toString('latin1');
    if (peer.stdout.length > 1 << 20) peer.stdout = peer.stdout.slice(-(1 << 19));
  });
  child.stderr?.resume();
  running.add(peer);
  void peer.exited.then(() => running.delete(peer));
  return peer;
}

/** Kills every program this process started and still running. */
export function killAll(): void {
  for (const p of running) p.kill();
  running.clear();
}
