/**
 * Resolves at the first SIGTERM or SIGINT, so the command can stop
 * gracefully; a second one exits at once with 128 + the signal's number,
 * for an operator who will not wait for running jobs.
 */
export function firstSignal(onSecond: (signal: NodeJS.Signals) => void): { stopped: Promise<NodeJS.Signals>; dispose(): void } {
  let seen: NodeJS.Signals | undefined
  let resolve!: (signal: NodeJS.Signals) => void
  const stopped = new Promise<NodeJS.Signals>((r) => (resolve = r))
  const handler = (signal: NodeJS.Signals) => {
    if (seen !== undefined) {
      onSecond(signal)
      process.exit(signal === 'SIGINT' ? 130 : 143)
    }
    seen = signal
    resolve(signal)
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
