/** The public surface of @userspace-proxy/kubernetes. */
export {};
