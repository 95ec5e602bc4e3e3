#!/usr/bin/env node
import cluster from 'node:cluster';
import { runCommand } from './run.js';

// The bin entry: everything else is in run.ts (or, in a `--workers` worker forked by node:cluster,
// workers/worker-main.ts), which never exits the process itself. Exiting here (rather than waiting
// for the event loop to empty) ends connections still open after the drain.
const run = cluster.isWorker
  ? import('./workers/worker-main.js').then((m) => m.runWorker())
  : runCommand(process.argv.slice(2));
run.then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(
      `userspace-proxy: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
