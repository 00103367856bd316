/**
 * Signals that come within this long of the first are the same request to
 * stop, asked again: a supervisor that repeats itself, or a terminal's
 * Ctrl-C that reaches both npm and the node process it forwards to.
 */
export const REPEAT_WINDOW_MS = 1_000

/**
 * Resolves at the first SIGTERM or SIGINT, so the command can stop
 * gracefully. Signals within REPEAT_WINDOW_MS of the first are taken as
 * that one again; one after it exits at once with 128 + the signal's
 * number, for an operator who will not wait for running jobs.
 */
export function firstSignal(onSecond: (signal: NodeJS.Signals) => void): { stopped: Promise<NodeJS.Signals>; dispose(): void } {
  let firstAt: number | undefined
  let resolve!: (signal: NodeJS.Signals) => void
  const stopped = new Promise<NodeJS.Signals>((r) => (resolve = r))
  const handler = (signal: NodeJS.Signals) => {
    if (firstAt === undefined) {
      firstAt = performance.now()
      resolve(signal)
      return
    }
    if (performance.now() - firstAt < REPEAT_WINDOW_MS) return
    onSecond(signal)
    process.exit(signal === 'SIGINT' ? 130 : 143)
  }
  process.on('SIGTERM', handler)
  process.on('SIGINT', handler)
  return {
    stopped,
    dispose() {
      process.off('SIGTERM', handler)
      process.off('SIGINT', handler)
    },
  }
}
