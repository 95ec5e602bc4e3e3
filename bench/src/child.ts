import { serveRole } from './rpc.js';

/** Entry of every benchmark child process: `child.ts <role>`. */
const role = process.argv[2];
switch (role) {
  case 'backend':
    serveRole((await import('./roles/backend.js')).backendMethods);
    break;
  case 'proxy':
    serveRole((await import('./roles/proxy-host.js')).proxyMethods);
    break;
  case 'load':
    serveRole((await import('./roles/loadgen.js')).loadMethods);
    break;
  case 'sctp':
    serveRole((await import('./roles/sctp.js')).sctpMethods);
    break;
  default:
    throw new Error(`unknown role ${role}`);
}
