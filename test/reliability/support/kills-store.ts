import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import Database from 'better-sqlite3'
import pg from 'pg'
import { Runner, type Driver, type Kind } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, testSchema } from '../../support/backends.js'
import { spawnWorker, type WorkerProcess } from '../../multiprocess/processes.js'
import { KINDS, type KindName } from './kills-kinds.js'

const WORKER = fileURLToPath(new URL('./kills-worker.ts', import.meta.url))
const silent = { debug() {}, info() {}, warn() {}, error() {} }

/** A job's row, as the crash tests compare it before and after a restart. */
export interface JobState {
  readonly id: string
  readonly kind: string
  readonly status: string
  readonly error: string | null
  readonly attempt: number
  readonly maxAttempts: number
  readonly result: string | null
  readonly runnerId: string | null
  readonly finishedAt: number | null
  readonly updatedAt: number
  readonly cancelRequested: boolean
}

/** One line of a kills-worker.ts ledger. */
export interface LedgerLine {
  readonly e: 'runner' | 'start' | 'end' | 'kill' | 'stop' | 'cont' | 'publish_refused'
  readonly id: string | null
  readonly attempt: number | null
  readonly pid: number
  /** The runner of the process that wrote it. */
  readonly runner: string
  /** On a `runner` line: the kinds it has handlers for. */
  readonly kinds?: string[]
  readonly step?: string
  readonly status?: string
}

/** One store (a SQLite file, a PostgreSQL schema) for crash tests, with its ledger directory. */
export interface CrashStore {
  readonly backend: 'sqlite' | 'postgres'
  /** The store's own temporary directory (the ledger's, and the SQLite file's): removed with it. */
  readonly dir: string
  /** A runner of this process that knows every kind of kills-kinds.ts and is never started: it enqueues, cancels and reads. */
  readonly producer: Runner
  /** The producer's handles, by kind name: `enqueueMany` stores a batch. */
  readonly kinds: Record<KindName, Kind<{ ms: number }>>
  /** Spawns kills-worker.ts on this store, with `env` added (JT_KILL_AT, JT_KINDS, ...). */
  spawn(env?: Record<string, string>): WorkerProcess
  /** Opens a driver on this store, as a new process would (the crash tests' own sweeping runner). */
  driver(options?: { sweepIntervalMs?: number; leaseMs?: number }): Driver
  /** Every job, in insertion order. */
  rows(): Promise<JobState[]>
  /** How many jobs are not terminal yet (scheduled, queued or running). */
  unfinished(): Promise<number>
  /** Every worker's ledger lines, in no particular order across processes. */
  ledger(): LedgerLine[]
  /** Whether the runner is registered with a live lease (PostgreSQL) or at all (SQLite). */
  registered(runnerId: string): Promise<boolean>
  /** SQLite's `PRAGMA integrity_check`; `ok` on PostgreSQL, which has none to run. */
  integrity(): Promise<string>
  /** Closes what it opened and removes the store. */
  drop(): Promise<void>
}

/** Settings of a store's workers: the lease (PostgreSQL), the sweep and the poll. */
export interface StoreOptions {
  readonly leaseMs?: number
  readonly sweepMs?: number
  readonly pollMs?: number
}

/** Makes a fresh store on `backend`, migrated, with an empty ledger directory. */
export async function crashStore(backend: 'sqlite' | 'postgres', options: StoreOptions = {}): Promise<CrashStore> {
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-kills-'))
  const { leaseMs = 1_000, sweepMs = 200, pollMs = 100 } = options
  const common = { JT_LEDGER_DIR: dir, JT_SWEEP_MS: String(sweepMs), JT_POLL_MS: String(pollMs), JT_WORKERS: '2' }
  const children: WorkerProcess[] = []
  const drivers: Driver[] = []
  const ledger = (): LedgerLine[] =>
    readdirSync(dir)
      .filter((f) => /^ledger-\d+\.jsonl$/.test(f))
      .flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as LedgerLine))
  const base = (workerEnv: Record<string, string>, open: (o: { sweepIntervalMs?: number; leaseMs?: number }) => Driver) => {
    const driver = (o: { sweepIntervalMs?: number; leaseMs?: number } = {}) => {
      const d = open(o)
      drivers.push(d)
      return d
    }
    const producer = new Runner({ driver: driver(), logger: silent })
    const kinds = Object.fromEntries(Object.entries(KINDS).map(([name, kind]) => [name, producer.register(kind as typeof KINDS.plain)])) as Record<KindName, Kind<{ ms: number }>>
    return {
      backend,
      dir,
      producer,
      kinds,
      driver,
      ledger,
      spawn(env: Record<string, string> = {}) {
        const child = spawnWorker({ ...common, ...workerEnv, ...env }, WORKER)
        children.push(child)
        return child
      },
      async close() {
        for (const c of children) c.child.kill('SIGKILL')
        await Promise.all(children.map((c) => c.exited))
        await producer.close()
        for (const d of drivers) await d.close().catch(() => undefined)
      },
    }
  }

  if (backend === 'sqlite') {
    const path = join(dir, 'jobs.db')
    const read = <R>(text: string, ...values: unknown[]): R[] => {
      const db = new Database(path, { readonly: true })
      try {
        db.pragma('busy_timeout = 1000')
        return db.prepare(text).all(...values) as R[]
      } finally {
        db.close()
      }
    }
    const b = base({ JT_BACKEND: 'sqlite', JT_SQLITE_PATH: path }, (o) => sqlite({ path, pollIntervalMs: 3_600_000, ...(o.sweepIntervalMs ? { sweepIntervalMs: o.sweepIntervalMs } : {}) }))
    return {
      ...b,
      async rows() {
        return read<Record<string, unknown>>(`SELECT ${COLUMNS} FROM jobtable_jobs ORDER BY seq`).map(toState)
      },
      async unfinished() {
        return read<{ n: number }>(`SELECT count(*) AS n FROM jobtable_jobs WHERE status IN ('scheduled', 'queued', 'running')`)[0]!.n
      },
      async registered(runnerId) {
        return read(`SELECT 1 FROM jobtable_runners WHERE id = ?`, runnerId).length > 0
      },
      async integrity() {
        return (read<{ integrity_check: string }>('PRAGMA integrity_check').map((r) => r.integrity_check)).join('; ')
      },
      async drop() {
        await b.close()
        rmSync(dir, { recursive: true, force: true })
      },
    }
  }

  const schema = testSchema()
  const admin = new pg.Pool({ connectionString: PG_URL, max: 2 })
  admin.on('error', () => undefined)
  const open = (o: { sweepIntervalMs?: number; leaseMs?: number }) => postgres({ connectionString: PG_URL, schema, leaseMs: o.leaseMs ?? leaseMs, ...(o.sweepIntervalMs ? { sweepIntervalMs: o.sweepIntervalMs } : {}) })
  const migrating = open({})
  await migrating.migrate()
  await migrating.close()
  const b = base({ JT_BACKEND: 'postgres', JT_PG_URL: PG_URL, JT_SCHEMA: schema, JT_LEASE_MS: String(leaseMs) }, open)
  const s = `"${schema}"`
  return {
    ...b,
    async rows() {
      return (await admin.query<Record<string, unknown>>(`SELECT ${COLUMNS.replace('result', 'result::text AS result')} FROM ${s}.jobs ORDER BY seq`)).rows.map(toState)
    },
    async unfinished() {
      return Number((await admin.query<{ n: string }>(`SELECT count(*) AS n FROM ${s}.jobs WHERE status IN ('scheduled', 'queued', 'running')`)).rows[0]!.n)
    },
    async registered(runnerId) {
      const live = await admin.query(`SELECT 1 FROM ${s}.runners WHERE id = $1 AND expires_at >= (extract(epoch from clock_timestamp()) * 1000)::bigint`, [runnerId])
      return live.rows.length > 0
    },
    async integrity() {
      return 'ok'
    },
    async drop() {
      await b.close()
      await admin.query(`DROP SCHEMA IF EXISTS ${s} CASCADE`).catch(() => undefined)
      await admin.end()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

const COLUMNS = 'id, kind, status, error, attempt, max_attempts, result, runner_id, finished_at, updated_at, cancel_requested'

function toState(r: Record<string, unknown>): JobState {
  return {
    id: r['id'] as string,
    kind: r['kind'] as string,
    status: r['status'] as string,
    error: (r['error'] as string | null) ?? null,
    attempt: Number(r['attempt']),
    maxAttempts: Number(r['max_attempts']),
    result: (r['result'] as string | null) ?? null,
    runnerId: (r['runner_id'] as string | null) ?? null,
    finishedAt: r['finished_at'] === null ? null : Number(r['finished_at']),
    updatedAt: Number(r['updated_at']),
    cancelRequested: Boolean(r['cancel_requested']),
  }
}

/** Resolves once `check` holds, polling every `everyMs`; rejects naming `what` after `timeoutMs`. */
export async function waitFor(what: string, check: () => Promise<boolean> | boolean, timeoutMs = 30_000, everyMs = 20): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await new Promise((r) => setTimeout(r, everyMs))
  }
}

/** Resolves with how the process exited, or rejects naming `what` after `timeoutMs`. */
export async function exitOf(proc: WorkerProcess, what: string, timeoutMs = 30_000): Promise<number | string | null> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what}: still running after ${timeoutMs} ms; stderr: ${proc.stderr()}`)), timeoutMs)))
  try {
    return await Promise.race([proc.exited, late])
  } finally {
    clearTimeout(timer)
  }
}

/** Job id → the attempts its handler started at, from the ledger. */
export function startsOf(ledger: readonly LedgerLine[]): Map<string, number[]> {
  const starts = new Map<string, number[]>()
  for (const l of ledger) if (l.e === 'start' && l.id !== null) starts.set(l.id, [...(starts.get(l.id) ?? []), l.attempt!])
  return starts
}

/** Runs `tasks` with at most `limit` at once; resolves with their results in order. */
export async function pool<T>(limit: number, tasks: readonly (() => Promise<T>)[]): Promise<T[]> {
  const results: T[] = new Array(tasks.length)
  let next = 0
  const lane = async () => {
    while (next < tasks.length) {
      const i = next++
      results[i] = await tasks[i]!()
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, lane))
  return results
}
