#!/usr/bin/env node
import { runCommand } from './run.js';

// The bin entry: everything else is in run.ts, which never exits the process itself. Exiting here
// (rather than waiting for the event loop to empty) ends connections still open after the drain.
runCommand(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(
      `userspace-proxy: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
