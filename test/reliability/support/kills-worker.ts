/**
 * A runner in its own process for the crash tests, which kills itself
 * with SIGKILL at one step of a job's life (or stops itself with SIGSTOP
 * just after a claim). Configured by environment variables:
 *
 * - JT_BACKEND: `sqlite` (JT_SQLITE_PATH) or `postgres` (JT_PG_URL,
 *   JT_SCHEMA, JT_LEASE_MS); JT_SWEEP_MS, JT_POLL_MS, JT_WORKERS.
 * - JT_KINDS: the kinds of kills-kinds.ts it runs, comma-separated
 *   (default `plain,flaky,idem,hold`).
 * - JT_LEDGER_DIR: where it appends, synchronously, one JSON line per
 *   event to `ledger-<pid>.jsonl`: `start` before a handler goes on,
 *   `end` when a final write has landed or been given up, `kill` just
 *   before it kills itself (with the step), `stop` and `cont` around a
 *   SIGSTOP, `publish_refused`, and first `runner` (its id and kinds).
 *   Every line names the process's runner. A line written survives the SIGKILL that
 *   follows it (it is in the kernel once appendFileSync returns).
 * - JT_KILL_AT: a step of KILL_STEPS (see kills-kinds.ts), the first job
 *   of kind `plain` (`flaky` for `retry`, `hold` for `cancel`) to reach it
 *   kills the process; `stop-after-claim`: every claim holding a `stale`
 *   job stops the process until SIGCONT. Unset: no kill.
 * - JT_UNKNOWN_GRACE_MS: the runner's unknownKindGraceMs.
 * - JT_LOG: a file each warning and error is appended to, as a JSON line.
 *
 * "In the final write" is inside its transaction: on SQLite a temporary
 * trigger of the writing connection calls a function that kills the
 * process mid-statement; on PostgreSQL a trigger this process's sessions
 * (and only theirs, by a session setting) fire sleeps in the statement,
 * this process kills itself once pg_stat_activity shows it sleeping, and
 * client_connection_check_interval makes the server notice the dead
 * client and roll the statement back. `recovery` is the same, for the
 * interrupted sweep of the runner's start.
 *
 * Prints `ready <runner id>` once started; SIGTERM closes the runner.
 */
import { appendFileSync } from 'node:fs'
import { join } from 'node:path'
import type Database from 'better-sqlite3'
import pg from 'pg'
import { jobEndChannel, jobStartChannel, Runner, type ClaimedJob, type Driver, type JobEndMessage, type JobFinish, type JobStartMessage } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { KINDS, type KindName, type KillStep } from './kills-kinds.js'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`kills-worker: ${name} is required`)
  return value
}
const killAt = process.env['JT_KILL_AT'] as KillStep | 'stop-after-claim' | undefined
const ledger = join(env('JT_LEDGER_DIR'), `ledger-${process.pid}.jsonl`)
/** This process's runner id, once its runner exists: every ledger line names it. */
let runnerId: string | undefined
const record = (e: string, id: string | null, attempt: number | null, extra: object = {}): void =>
  appendFileSync(ledger, JSON.stringify({ e, id, attempt, pid: process.pid, runner: runnerId, ...extra }) + '\n')
const logFile = process.env['JT_LOG']
const line = (level: string) => (fields: object, message: string) => {
  if (logFile) appendFileSync(logFile, JSON.stringify({ pid: process.pid, level, ...fields, message }) + '\n')
}
const logger = { debug() {}, info() {}, warn: line('warn'), error: line('error') }

/** Records the kill, then kills this process: nothing after this line runs. */
function die(step: string, id: string | null, attempt: number | null): void {
  record('kill', id, attempt, { step })
  process.kill(process.pid, 'SIGKILL')
}

/** Claimed jobs by id, so a final write (which names only ids) is known by kind. */
const claimed = new Map<string, ClaimedJob>()
const kindOf = (id: string) => claimed.get(id)?.kind
/** Inside the transaction: what makes the process die there (set up below, per backend). */
let killInside: ((step: string, id: string | null, attempt: number | null) => void) | undefined
const inside = killAt === 'in-final-write' || killAt === 'recovery'

let real: Driver
if (env('JT_BACKEND') === 'postgres') {
  const schema = env('JT_SCHEMA')
  const url = new URL(env('JT_PG_URL'))
  const appName = `jtkill${process.pid}`
  if (inside) {
    url.searchParams.set('application_name', appName)
    url.searchParams.set('options', `-c jt.slow=${killAt === 'recovery' ? 'any' : 'final'} -c client_connection_check_interval=20`)
  }
  real = postgres({
    connectionString: url.toString(),
    schema,
    leaseMs: Number(process.env['JT_LEASE_MS'] ?? 30_000),
    ...(process.env['JT_POLL_MS'] ? { pollIntervalMs: Number(process.env['JT_POLL_MS']) } : {}),
    ...(process.env['JT_SWEEP_MS'] ? { sweepIntervalMs: Number(process.env['JT_SWEEP_MS']) } : {}),
  })
  if (inside) {
    await real.migrate!()
    const admin = new pg.Client({ connectionString: env('JT_PG_URL') })
    await admin.connect()
    const s = `"${schema}"`
    await admin.query(`CREATE OR REPLACE FUNCTION ${s}.jt_slow_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$`)
    await admin.query(`CREATE OR REPLACE TRIGGER jt_slow_write BEFORE UPDATE ON ${s}.jobs FOR EACH ROW
      WHEN (OLD.status = 'running' AND NEW.status <> 'running'
            AND (current_setting('jt.slow', true) = 'any' OR (current_setting('jt.slow', true) = 'final' AND NEW.kind = 'plain' AND NEW.status = 'succeeded')))
      EXECUTE FUNCTION ${s}.jt_slow_write()`)
    killInside = (step, id, attempt) => {
      const poll = async () => {
        for (;;) {
          const { rows } = await admin.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'PgSleep'`, [appName])
          if (rows.length > 0) return die(step, id, attempt)
          await new Promise((r) => setTimeout(r, 10))
        }
      }
      void poll()
    }
  }
} else {
  const driver = sqlite({
    path: env('JT_SQLITE_PATH'),
    sweepIntervalMs: Number(process.env['JT_SWEEP_MS'] ?? 5_000),
    ...(process.env['JT_POLL_MS'] ? { pollIntervalMs: Number(process.env['JT_POLL_MS']) } : {}),
  })
  real = driver
  if (inside) {
    // A temporary trigger lives on the writing connection only: other processes on the file never fire it.
    const writer = driver.database as Database.Database
    writer.function('jt_kill', (id: unknown, attempt: unknown) => void die(killAt!, id as string, attempt as number))
    const when = killAt === 'recovery' ? "NEW.status <> 'running'" : "NEW.status = 'succeeded' AND NEW.kind = 'plain'"
    writer.exec(`CREATE TEMP TRIGGER jt_kill AFTER UPDATE OF status ON jobtable_jobs WHEN OLD.status = 'running' AND ${when}
                 BEGIN SELECT jt_kill(NEW.id, NEW.attempt); END`)
  }
}

/** What a claim returned: remembered by id; the `claimed` step dies here, `stop-after-claim` stops here. */
function claimedNow(jobs: ClaimedJob[]): ClaimedJob[] {
  for (const job of jobs) claimed.set(job.id, job)
  if (killAt === 'claimed') {
    const target = jobs.find((j) => j.kind === 'plain')
    if (target) die(killAt, target.id, target.attempt)
  }
  if (killAt === 'stop-after-claim') {
    for (const job of jobs.filter((j) => j.kind === 'stale')) {
      record('stop', job.id, job.attempt)
      process.kill(process.pid, 'SIGSTOP')
      record('cont', job.id, job.attempt)
    }
  }
  return jobs
}

/** On entry of a final write: the steps just before it. */
function finishing(finishes: readonly JobFinish[]): void {
  const plainDone = finishes.find((f) => kindOf(f.id) === 'plain' && f.status === 'succeeded')
  if (killAt === 'after-handler' && plainDone) die(killAt, plainDone.id, plainDone.attempt)
  if (killAt === 'in-final-write' && plainDone && killInside) killInside(killAt, plainDone.id, plainDone.attempt)
  const retry = finishes.find((f) => kindOf(f.id) === 'flaky' && f.status === 'retry')
  if (killAt === 'retry' && retry) die(killAt, retry.id, retry.attempt)
}

/** Once a final write has committed: the step just after it. */
function finished(finishes: readonly JobFinish[], applied: boolean[]): void {
  if (killAt !== 'after-commit') return
  const i = finishes.findIndex((f, i) => applied[i] && kindOf(f.id) === 'plain' && f.status === 'succeeded')
  if (i >= 0) die(killAt, finishes[i]!.id, finishes[i]!.attempt)
}

const driver = new Proxy(real, {
  get(target, prop) {
    // The target as the receiver: the drivers' getters read private fields.
    const value = Reflect.get(target, prop) as unknown
    if (typeof value !== 'function') return value
    const call = (...args: unknown[]) => (value as (...a: unknown[]) => unknown).apply(target, args)
    switch (prop) {
      case 'jobClaim':
        return async (...args: unknown[]) => claimedNow((await call(...args)) as ClaimedJob[])
      case 'jobFinishMany':
        return async (params: { finishes: readonly JobFinish[] }) => {
          finishing(params.finishes)
          const applied = (await call(params)) as boolean[]
          finished(params.finishes, applied)
          return applied
        }
      case 'jobFinishManyAndClaim':
        return async (params: { finishes: readonly JobFinish[] }) => {
          finishing(params.finishes)
          const result = (await call(params)) as { applied: boolean[]; claimed: ClaimedJob[] }
          finished(params.finishes, result.applied)
          return { applied: result.applied, claimed: claimedNow(result.claimed) }
        }
      case 'jobFailInterrupted':
        return (...args: unknown[]) => {
          if (killAt === 'recovery' && env('JT_BACKEND') === 'postgres') killInside!(killAt, null, null)
          return call(...args)
        }
      default:
        return call
    }
  },
})

const runner = new Runner({
  driver,
  workers: Number(env('JT_WORKERS')),
  logger,
  ...(process.env['JT_UNKNOWN_GRACE_MS'] ? { unknownKindGraceMs: Number(process.env['JT_UNKNOWN_GRACE_MS']) } : {}),
})

runnerId = runner.id
const kindNames = (process.env['JT_KINDS'] ?? 'plain,flaky,idem,hold').split(',') as KindName[]
// Before any claim: which runner this process is, and the kinds it has.
record('runner', null, null, { kinds: kindNames })

jobStartChannel.subscribe((m) => {
  const { jobId, kind } = m as JobStartMessage
  if (killAt === 'before-handler' && kind === 'plain') die(killAt, jobId, claimed.get(jobId)?.attempt ?? null)
})
jobEndChannel.subscribe((m) => {
  const { jobId, status } = m as JobEndMessage
  record('end', jobId, claimed.get(jobId)?.attempt ?? null, { status })
})

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
type Job = { id: string; attempt: number; signal: AbortSignal; publish(p: unknown): Promise<void>; fail(code: string): never }
const handlers: Record<KindName, (p: { ms: number }, job: Job) => Promise<unknown>> = {
  plain: async ({ ms }, job) => {
    await job.publish({ ok: false })
    if (killAt === 'mid-handler') die(killAt, job.id, job.attempt)
    await sleep(ms)
    return { ok: true }
  },
  flaky: async (_p, job) => {
    if (job.attempt === 1) job.fail('flaky')
  },
  idem: async ({ ms }) => sleep(ms),
  hold: async (_p, job) => {
    const { signal } = job
    if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
    if (killAt === 'cancel') die(killAt, job.id, job.attempt)
  },
  stale: async (_p, job) => {
    try {
      await job.publish({ ok: false })
    } catch {
      record('publish_refused', job.id, job.attempt)
    }
    return { ok: true }
  },
  work: async ({ ms }) => sleep(ms),
  work_v2: async ({ ms }) => sleep(ms),
}
for (const name of kindNames) {
  const handler = handlers[name]
  runner.register(KINDS[name] as typeof KINDS.plain, async (payload, job) => {
    record('start', job.id, job.attempt)
    return handler(payload, job as unknown as Job) as Promise<{ ok: boolean }>
  })
}
await runner.start()
process.stdout.write(`ready ${runner.id}\n`)
process.on('SIGTERM', () => {
  void runner.close().then(() => process.exit(0))
})
