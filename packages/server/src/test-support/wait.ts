/** Polls `check` until it returns true, with a generous deadline; for real sockets and files. */
export async function until(
  check: () => boolean | Promise<boolean>,
  what = 'a condition',
  timeoutMs = 15_000,
) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
