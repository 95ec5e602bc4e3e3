/**
 * The `/status` page: one self-contained document (inline CSS and script, no build step, no
 * external assets) that fetches `/status.json` every 2 s and redraws its table without a reload.
 * Every value from the model is put in the page with `textContent`, never as markup: Service
 * descriptions, endpoint addresses and error lines come from input. The Content-Security-Policy
 * sent with it (STATUS_PAGE_CSP) forbids anything but the inline script and style and same-origin
 * fetches, as a second line of defence.
 */

/** How often the page refreshes, milliseconds. */
export const STATUS_REFRESH_MS = 2000;

/** The page's Content-Security-Policy. */
export const STATUS_PAGE_CSP =
  "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const SCRIPT = `
'use strict';
const $ = (id) => document.getElementById(id);
const el = (tag, text, cls) => {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
};
const fmtBytes = (n) => {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + u[i];
};
let last = null;
function portals(p) {
  if (p.portals.length === 0) return 'none';
  return p.portals.map((x) => (x.ip === '' ? '*' : x.ip) + ':' + x.port + (x.external ? ' (external)' : '') + ' \\u2192 :' + x.proxyPort).join('\\n');
}
function render() {
  const m = last;
  if (!m) return;
  const q = $('filter').value.trim().toLowerCase();
  $('summary').textContent = 'userspace-proxy ' + m.version + ' \\u00b7 mode ' + m.proxyMode +
    ' \\u00b7 ' + m.servicePorts.length + ' Service port(s) \\u00b7 updated ' + m.generatedAt;
  const s = m.sync;
  $('sync').textContent = s.lastTimestampSeconds === null ? 'no sync yet' :
    'last sync ' + new Date(s.lastTimestampSeconds * 1000).toISOString() +
    (s.lastDurationSeconds === null ? '' : ' in ' + (s.lastDurationSeconds * 1000).toFixed(1) + ' ms') +
    ' \\u00b7 ' + s.count + ' sync(s)';
  const workers = Array.isArray(m.workers) ? m.workers : [];
  $('workers-section').hidden = workers.length === 0;
  $('workers').replaceChildren(...workers.map((w) => {
    const tr = el('tr');
    tr.dataset.worker = String(w.worker);
    tr.append(el('td', w.worker, 'num'), el('td', w.pid, 'num'));
    tr.append(el('td', w.connectionsActive, w.connectionsActive > 0 ? 'num active' : 'num'), el('td', w.connectionsTotal, 'num'));
    return tr;
  }));
  const body = $('rows');
  const rows = [];
  for (const p of m.servicePorts) {
    const hay = (p.namespace + '/' + p.name + ':' + p.port + ' ' + p.description).toLowerCase();
    if (q !== '' && !hay.includes(q)) continue;
    const tr = el('tr');
    tr.dataset.key = p.key + '/' + p.protocol;
    const svc = el('td');
    svc.append(el('span', p.namespace + '/', 'ns'), el('b', p.name), el('span', p.port === '' ? '' : ':' + p.port));
    if (p.description !== '') svc.append(el('div', p.description, 'desc'));
    tr.append(svc, el('td', p.protocol + ' ' + p.servicePort), el('td', portals(p), 'pre'));
    const eps = p.endpoints === null ? 'unknown' : p.endpoints.length === 0 ? 'none' : p.endpoints.join('\\n');
    tr.append(el('td', eps, p.endpoints !== null && p.endpoints.length === 0 ? 'pre warn' : 'pre'));
    tr.append(el('td', p.ejected === null ? 'n/a' : p.ejected.length === 0 ? '-' : p.ejected.join('\\n'), 'pre'));
    tr.append(el('td', p.connectionsActive, p.connectionsActive > 0 ? 'num active' : 'num'), el('td', p.connectionsTotal, 'num'));
    tr.append(el('td', fmtBytes(p.bytesIn), 'num'), el('td', fmtBytes(p.bytesOut), 'num'));
    tr.append(el('td', p.udpSessionsActive, 'num'), el('td', p.heldConnections === null ? 'off' : p.heldConnections, 'num'));
    const reasons = Object.entries(p.refused).map(([k, v]) => k + ' ' + v).join('\\n');
    tr.append(el('td', reasons === '' ? '-' : reasons, reasons === '' ? 'pre' : 'pre warn'));
    rows.push(tr);
  }
  if (rows.length === 0) {
    const tr = el('tr');
    const td = el('td', q === '' ? 'no Services' : 'no Service matches the filter', 'empty');
    td.colSpan = 12;
    tr.append(td);
    rows.push(tr);
  }
  body.replaceChildren(...rows);
  const errs = $('errors');
  const items = m.recentErrors.map((e) => el('li', e.time + ' ' + e.kind + ' ' + e.service + ': ' + e.message));
  if (items.length === 0) items.push(el('li', 'none', 'empty'));
  errs.replaceChildren(...items);
}
async function refresh() {
  try {
    const res = await fetch('/status.json', { cache: 'no-store' });
    if (!res.ok) throw new Error('HTTP ' + res.status);
    last = await res.json();
    $('state').textContent = '';
    render();
  } catch (err) {
    $('state').textContent = 'cannot reach the daemon: ' + (err && err.message ? err.message : String(err));
  }
}
$('filter').addEventListener('input', render);
refresh();
setInterval(refresh, ${STATUS_REFRESH_MS});
`;

/** The HTML document served at `/status`. */
export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>userspace-proxy status</title>
<style>
body { font: 13px/1.4 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f6f7f9; }
header { background: #24364b; color: #fff; padding: 10px 16px; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
header h1 { font-size: 16px; margin: 0; }
header input { padding: 4px 8px; border-radius: 4px; border: 0; min-width: 240px; }
#summary, #sync { opacity: .9; }
#state { color: #ffb4a8; font-weight: bold; }
main { padding: 12px 16px; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border: 1px solid #d6dae0; padding: 4px 6px; vertical-align: top; text-align: left; }
th { background: #e6ebf1; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.active { font-weight: bold; color: #0b6b2f; }
.pre { white-space: pre; font-family: ui-monospace, monospace; font-size: 12px; }
.warn { color: #a4260b; }
.ns { color: #66707c; }
.desc { color: #4a5563; font-size: 12px; white-space: pre-wrap; overflow-wrap: anywhere; }
.empty { color: #66707c; font-style: italic; }
h2 { font-size: 14px; margin: 16px 0 6px; }
#workers-table { width: auto; }
#errors { font-family: ui-monospace, monospace; font-size: 12px; background: #fff; border: 1px solid #d6dae0; margin: 0; padding: 6px 6px 6px 24px; max-height: 240px; overflow: auto; white-space: pre-wrap; overflow-wrap: anywhere; }
</style>
</head>
<body>
<header>
<h1>userspace-proxy</h1>
<input id="filter" type="search" placeholder="filter by namespace/name" aria-label="filter by namespace/name">
<span id="summary">loading\u2026</span>
<span id="sync"></span>
<span id="state"></span>
</header>
<main>
<table>
<thead><tr>
<th>Service port</th><th>Protocol</th><th>Portals</th><th>Endpoints</th><th>Ejected</th>
<th>Active</th><th>Total</th><th>Bytes in</th><th>Bytes out</th><th>UDP sessions</th><th>Held</th><th>Refused</th>
</tr></thead>
<tbody id="rows"></tbody>
</table>
<section id="workers-section" hidden>
<h2>Workers (one process each; TCP listeners shared, UDP, SCTP and idled Services in worker 1)</h2>
<table id="workers-table">
<thead><tr><th>Worker</th><th>pid</th><th>Active</th><th>Total</th></tr></thead>
<tbody id="workers"></tbody>
</table>
</section>
<h2>Recent errors (newest first)</h2>
<ul id="errors"></ul>
</main>
<script>${SCRIPT}</script>
</body>
</html>
`;
