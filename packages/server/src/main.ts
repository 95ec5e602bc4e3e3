#!/usr/bin/env node
import { VERSION } from './version.js';

// Placeholder until the daemon lands: answers --version and --help only.
const arg = process.argv[2];
if (arg === '--version') {
  process.stdout.write(`userspace-proxy ${VERSION}\n`);
} else {
  process.stdout.write('usage: userspace-proxy [--help] [--version]\n');
}
