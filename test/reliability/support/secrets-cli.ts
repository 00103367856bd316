import { spawn, type ChildProcess } from 'node:child_process'
import { afterEach } from 'vitest'

/** A `jobtable` command running in a child process, with what it wrote so far. */
export interface Command {
  readonly proc: ChildProcess
  readonly stdout: string
  readonly stderr: string
  /** Resolves with the exit code, or the signal's name if a signal ended it. */
  readonly exit: Promise<number | string>
  /** Resolves with the first match of re in stdout (or stderr), waiting for it; rejects if the process exits first. */
  waitFor(re: RegExp, stream?: 'stdout' | 'stderr'): Promise<RegExpMatchArray>
}

const started: ChildProcess[] = []
afterEach(() => {
  // Only the processes this file started, and only those still running.
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
})

/** Runs `jobtable <args>` from the sources (src/cli/main.ts through tsx) with `env` added; killed after the test if still up. */
export function jobtableCommand(args: string[], env: Record<string, string> = {}): Command {
  const proc = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', 'src/cli/main.ts', ...args], {
    env: { ...process.env, NO_COLOR: '1', JOBTABLE_DATABASE: '', JOBTABLE_TOKENS: '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  started.push(proc)
  let stdout = ''
  let stderr = ''
  let waiters: (() => void)[] = []
  const notify = () => {
    const w = waiters
    waiters = []
    for (const f of w) f()
  }
  proc.stdout!.on('data', (d: Buffer) => {
    stdout += d.toString()
    notify()
  })
  proc.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString()
    notify()
  })
  const exit = new Promise<number | string>((resolve) => proc.once('exit', (code, signal) => resolve(signal ?? code ?? -1)))
  void exit.then(notify)
  return {
    proc,
    get stdout() {
      return stdout
    },
    get stderr() {
      return stderr
    },
    exit,
    async waitFor(re, stream = 'stdout') {
      for (;;) {
        const m = (stream === 'stdout' ? stdout : stderr).match(re)
        if (m) return m
        if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`jobtable ${args[0]} exited (${proc.exitCode ?? proc.signalCode}) before writing ${re}: ${stderr.slice(-2000)}`)
        await new Promise<void>((r) => waiters.push(r))
      }
    },
  }
}
