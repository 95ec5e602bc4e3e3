/** The version the daemon reports with `--version` and in its "Starting" event. */
export const VERSION = '0.1.0';
