import { soakMain } from './cli.js';

// The entry of `pnpm soak`. Exit at once: a probe's sockets must not keep the run alive after the
// document is written.
process.exit(await soakMain(process.argv.slice(2)));
