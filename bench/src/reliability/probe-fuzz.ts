import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { validateEndpointSlice, validateEndpoints, validateService } from '@userspace-proxy/core';
import {
  decodeConfiguration,
  defaultConfiguration,
  parseManifest,
  validateConfiguration,
} from '@userspace-proxy/server';
import { applyServices, daemonCommand, REPO_ROOT, startDaemon } from './daemon.js';
import { Fuzzer } from './fuzz-gen.js';
import { echoBackends, manifest, roundTrip, subnet } from './net.js';
import type { Probe } from './types.js';

const MIB = 1024 * 1024;

type Kind = 'Service' | 'EndpointSlice' | 'Endpoints' | 'config file' | 'manifest';

/**
 * How many of each kind, out of every 100 inputs: the validators, cheap, get most; the YAML parses
 * of config files and manifests cost a few milliseconds each on a loaded machine, so they get fewer
 * (still tens of thousands in a full run).
 */
const MIX: readonly Kind[] = [
  ...Array<Kind>(45).fill('Service'),
  ...Array<Kind>(35).fill('EndpointSlice'),
  ...Array<Kind>(10).fill('Endpoints'),
  ...Array<Kind>(7).fill('config file'),
  ...Array<Kind>(3).fill('manifest'),
];

interface Tally {
  tried: number;
  accepted: number;
  crashes: number;
}

/** A configuration file's text: a fuzzed object as JSON, sometimes with its bytes mangled. */
function configText(f: Fuzzer): string {
  const text = JSON.stringify(f.mutate(f.config()));
  if (f.int(4) > 0) return text;
  const at = f.int(text.length);
  return (
    text.slice(0, at) + f.pick(['"', ':', '{', '\n- ', '\u0000', '!!', '&x *x']) + text.slice(at)
  );
}

/** One input through the code that reads it; true when accepted. Throws only on a defect. */
function feed(kind: Kind, f: Fuzzer): boolean {
  switch (kind) {
    case 'Service':
      return validateService(f.mutate(f.service())).ok;
    case 'EndpointSlice':
      return validateEndpointSlice(f.mutate(f.slice())).ok;
    case 'Endpoints':
      return validateEndpoints(f.mutate(f.endpoints())).ok;
    case 'config file': {
      const decoded = decodeConfiguration(configText(f));
      if (decoded.input === undefined || decoded.errors.length > 0) return false;
      return validateConfiguration(defaultConfiguration(decoded.input)).length === 0;
    }
    case 'manifest':
      return parseManifest(f.manifest()).ok;
  }
}

/** Runs the daemon's bin on a config file with --write-config-to: exit 0 or 1, never a crash. */
function runConfig(build: 'built' | 'sources', dir: string, text: string) {
  const file = join(dir, 'fuzzed.yaml');
  writeFileSync(file, text);
  return new Promise<{ code: number | null; crashed: boolean }>((resolve) => {
    const args = [
      ...daemonCommand(build),
      '--config',
      file,
      '--write-config-to',
      join(dir, 'out.yaml'),
    ];
    const child = spawn(process.execPath, args, {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (c: Buffer) => {
      if (err.length < 100_000) err += c.toString();
    });
    child.stdout.resume();
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({
        code,
        crashed: (code !== 0 && code !== 1) || /\n\s+at .+\(.+:\d+:\d+\)/.test(err),
      });
    });
  });
}

/**
 * A million fuzzed inputs through validation and parsing in this process, then a sample through the
 * live daemon: manifests written to its services file (it must keep serving the Service the sample
 * does not touch) and configuration files given to its bin.
 */
export const fuzzProbe: Probe = async (ctx) => {
  const { inProcess, liveManifests, liveConfigs } = ctx.sizes.fuzz;
  const seed = ctx.seed;
  const f = new Fuzzer(seed);
  const tally = new Map<Kind, Tally>(MIX.map((k) => [k, { tried: 0, accepted: 0, crashes: 0 }]));
  const firstCrashes: string[] = [];
  let slowest = 0;
  let slowestKind = '';
  let peakHeap = 0;
  let peakRss = 0;
  const heapBefore = process.memoryUsage().heapUsed;
  const t0 = performance.now();
  for (let i = 0; i < inProcess; i++) {
    const kind = MIX[i % MIX.length] as Kind;
    const t = tally.get(kind) as Tally;
    t.tried++;
    const s = performance.now();
    try {
      if (feed(kind, f)) t.accepted++;
    } catch (err) {
      t.crashes++;
      if (firstCrashes.length < 5) {
        firstCrashes.push(
          `${kind} #${i}: ${err instanceof Error ? (err.stack ?? err.message).slice(0, 600) : String(err)}`,
        );
      }
    }
    const took = performance.now() - s;
    if (took > slowest) {
      slowest = took;
      slowestKind = kind;
    }
    if (i % 20_000 === 0) {
      const mem = process.memoryUsage();
      peakHeap = Math.max(peakHeap, mem.heapUsed);
      peakRss = Math.max(peakRss, mem.rss);
      if (i % 100_000 === 0)
        ctx.log(`fuzz: ${i}/${inProcess} in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
    }
  }
  const inProcessS = (performance.now() - t0) / 1000;
  const crashes = [...tally.values()].reduce((n, t) => n + t.crashes, 0);

  // The live daemon: a Service the sample never touches must stay served.
  const net = subnet();
  const backends = await echoBackends([`${net}10`]);
  const keep = manifest([
    { name: 'keep', ip: `${net}1`, port: 8080, targetPort: backends.port, endpoints: [`${net}10`] },
  ]);
  const daemon = await startDaemon({ net, build: ctx.build, services: keep });
  const live = new Fuzzer(seed + 1, net);
  const outcomes: Record<string, number> = { applied: 0, rejected: 0, none: 0 };
  let unserved = 0;
  const tl = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'soak-fuzz-'));
  let configCrashes = 0;
  const configCodes: Record<string, number> = {};
  try {
    for (let i = 0; i < liveManifests && daemon.alive(); i++) {
      const outcome = await applyServices(daemon, `${keep}---\n${live.manifest()}`, 5000);
      outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
      const r = await roundTrip(`${net}1`, 8080, 'still\n', 5000);
      if (!('ms' in r)) unserved++;
    }
    const alive = daemon.alive();
    const served = await roundTrip(`${net}1`, 8080, 'end\n', 5000);
    const liveS = (performance.now() - tl) / 1000;
    const rssLive = daemon.rss();
    for (let i = 0; i < liveConfigs; i++) {
      const r = await runConfig(ctx.build, dir, configText(live));
      if (r.crashed) configCrashes++;
      configCodes[String(r.code)] = (configCodes[String(r.code)] ?? 0) + 1;
    }
    const rows = [...tally].map(
      ([k, t]) => `${k}: ${t.tried} tried, ${t.accepted} accepted, ${t.crashes} crashed`,
    );
    return {
      id: 'fuzz',
      title: 'Fuzzed Services, EndpointSlices, Endpoints, config files and manifests',
      done:
        `${inProcess} inputs (seed ${seed}) in this process: valid objects with 1–4 random ` +
        `mutations each (edge values, deleted and added fields, changed types, lists blown up to ` +
        `300 items, 50 KB–150 KB strings) through core's validators, configuration files through ` +
        `decodeConfiguration and validateConfiguration, and manifest texts (mutated objects, mangled ` +
        `bytes, alias bombs, deep nesting) through parseManifest. Then ${liveManifests} fuzzed ` +
        `manifests written to the live daemon's services file beside a Service they never touch ` +
        `(checked after each), and ${liveConfigs} fuzzed configuration files given to the bin ` +
        `(--config … --write-config-to).`,
      figures: [
        {
          name: 'crashes (exceptions) in this process',
          value: `${crashes} of ${inProcess}`,
          goal: '0',
          pass: crashes === 0,
        },
        { name: 'by kind', value: rows.join('; '), goal: '—' },
        {
          name: 'time in this process; slowest single input',
          value: `${inProcessS.toFixed(1)} s; ${slowest.toFixed(0)} ms (${slowestKind})`,
          goal: '—',
        },
        {
          name: 'peak heap / RSS of the fuzzing process (heap at start)',
          value: `${(peakHeap / MIB).toFixed(0)} MiB / ${(peakRss / MIB).toFixed(0)} MiB (${(heapBefore / MIB).toFixed(0)} MiB)`,
          goal: '< 1024 MiB RSS',
          pass: peakRss < 1024 * MIB,
        },
        {
          name: 'live daemon: manifests applied / rejected / not reloaded',
          value: `${outcomes.applied} / ${outcomes.rejected} / ${outcomes.none} in ${liveS.toFixed(1)} s`,
          goal: '—',
        },
        {
          name: 'live daemon: crashed; untouched Service not served after a manifest',
          value: `${alive ? 'no' : 'YES'}; ${unserved} of ${liveManifests}`,
          goal: 'no; 0',
          pass: alive && unserved === 0 && 'ms' in served,
        },
        {
          name: 'live daemon RSS after the sample',
          value: `${(rssLive / MIB).toFixed(1)} MiB`,
          goal: '—',
        },
        {
          name: 'bin on fuzzed config files: crashes (exit codes)',
          value: `${configCrashes} (${Object.entries(configCodes)
            .map(([c, n]) => `${c}: ${n}`)
            .join(', ')})`,
          goal: '0 (exit 0 or 1 only)',
          pass: configCrashes === 0,
        },
      ],
      notes: firstCrashes,
    };
  } finally {
    await daemon.stop('SIGKILL');
    await backends.close();
    rmSync(dir, { recursive: true, force: true });
  }
};
