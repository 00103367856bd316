import { spawn, type ChildProcess } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { fileURLToPath } from 'node:url'

const WORKER = fileURLToPath(new URL('./worker-process.ts', import.meta.url))

/** A runner in a child process (see worker-process.ts). */
export interface WorkerProcess {
  readonly child: ChildProcess
  /** Resolves to the child's runner id once its runner has started. */
  readonly ready: Promise<string>
  /** Resolves with the exit code or signal once the child has exited. */
  readonly exited: Promise<number | string | null>
  /** What the child wrote to standard error so far. */
  stderr(): string
}

/** Spawns `node --import tsx --conditions=source worker-process.ts` (or another `script` that prints `ready <id>` alike) with `env` added. */
export function spawnWorker(env: Record<string, string>, script: string = WORKER): WorkerProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', '--conditions=source', script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
  const exited = new Promise<number | string | null>((resolve) => child.on('exit', (code, signal) => resolve(signal ?? code)))
  const ready = new Promise<string>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const match = /ready (\S+)\n/.exec(out)
      if (match) resolve(match[1]!)
    })
    void exited.then((how) => reject(new Error(`worker process exited (${how}) before it was ready: ${stderr}`)))
  })
  ready.catch(() => undefined)
  return { child, ready, exited, stderr: () => stderr }
}

/** Polls `check` until it returns true; for states only the database shows. */
export async function eventually(check: () => Promise<boolean>, everyMs = 100): Promise<void> {
  while (!(await check())) await new Promise((r) => setTimeout(r, everyMs))
}

/** Runs a read-only query on a SQLite file, through a connection of its own, closed after. */
export function readSqlite<R>(path: string, text: string, ...values: unknown[]): R[] {
  const db = new Database(path, { readonly: true })
  try {
    return db.prepare(text).all(...values) as R[]
  } finally {
    db.close()
  }
}

/** Job id → handler starts, merged from the ledger file each SQLite worker process keeps in `dir` (see worker-process.ts). */
export function sqliteLedger(dir: string): Map<string, number> {
  const starts = new Map<string, number>()
  for (const file of readdirSync(dir).filter((f) => /^ledger-\d+\.db$/.test(f))) {
    for (const { job_id } of readSqlite<{ job_id: string }>(join(dir, file), 'SELECT job_id FROM ledger')) starts.set(job_id, (starts.get(job_id) ?? 0) + 1)
  }
  return starts
}
