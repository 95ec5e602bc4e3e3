/** The public surface of @userspace-proxy/server (the daemon's building blocks). */
export { VERSION } from './version.js';
