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
  case 'idler-proxy':
    serveRole((await import('./roles/idler-roles.js')).idlerProxyMethods);
    break;
  case 'idler-clients':
    serveRole((await import('./roles/idler-roles.js')).idlerClientMethods);
    break;
  case 'idler-backend':
    serveRole((await import('./roles/idler-roles.js')).idlerBackendMethods);
    break;
  case 'sctp':
    serveRole((await import('./roles/sctp.js')).sctpMethods);
    break;
  case 'reliability-peer':
    serveRole((await import('./reliability/peer-child.js')).peerMethods);
    break;
  default:
    throw new Error(`unknown role ${role}`);
}
