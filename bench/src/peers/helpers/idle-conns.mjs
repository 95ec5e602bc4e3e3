// The idle-connection helper of `pnpm bench --peers`, in two roles, driven by lines on stdin:
//   node idle-conns.mjs hold IP PORT    accepts and keeps connections; "count" → "count N"
//   node idle-conns.mjs open IP PORT    "open N" → opens connections until N are up → "open N";
//                                       "close" → closes them all → "closed"
// Each role is a process of its own so that neither eats into the other's file descriptors (the
// limit is 20 000 per process, and a proxy needs two per idle connection). Plain JavaScript.
import net from 'node:net';
import { createInterface } from 'node:readline';

const [role, ip, port] = process.argv.slice(2);
const say = (s) => process.stdout.write(`${s}\n`);
const sockets = new Set();

if (role === 'hold') {
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  server.listen({ host: ip, port: Number(port), backlog: 4096 }, () => say('ready'));
}

/** Opens connections at most 64 at a time until `target` are established. */
async function openUpTo(target) {
  let failures = 0;
  while (sockets.size < target) {
    const batch = Math.min(64, target - sockets.size);
    await Promise.all(
      Array.from(
        { length: batch },
        () =>
          new Promise((resolve) => {
            const s = net.connect({ host: ip, port: Number(port) });
            s.once('connect', () => {
              sockets.add(s);
              resolve();
            });
            s.once('error', () => {
              failures++;
              s.destroy();
              resolve();
            });
            s.on('close', () => sockets.delete(s));
          }),
      ),
    );
    if (failures > 100) throw new Error(`${failures} connections failed`);
  }
}

createInterface({ input: process.stdin }).on('line', async (line) => {
  const [cmd, arg] = line.trim().split(/\s+/);
  try {
    if (cmd === 'count') say(`count ${sockets.size}`);
    else if (cmd === 'open') {
      await openUpTo(Number(arg));
      say(`open ${sockets.size}`);
    } else if (cmd === 'close') {
      for (const s of sockets) s.destroy();
      sockets.clear();
      say('closed');
    } else say(`error unknown command ${JSON.stringify(line.slice(0, 40))}`);
  } catch (err) {
    say(`error ${String(err.message).slice(0, 200)}`);
  }
});
process.stdin.on('end', () => process.exit(0));
if (role === 'open') say('ready');
