import { checkSqlitePath, isPostgresUrl, pgClientFor, pgFailure } from './database.js'
import { checkSchema, schemaOf, type SchemaCheck } from './schema.js'
import { COMMON_FLAGS, databaseOf, type CliContext } from './runtime.js'
import { durationFlag, EXIT, HELP, parse } from './usage.js'

/** A runner the database knows, as `jobtable doctor` shows it. */
interface RunnerRow {
  readonly id: string
  /** The jobtable release it runs; null for releases before runners recorded it. */
  readonly version: string | null
  readonly kinds: string[]
  readonly startedAt: number
  readonly heartbeatAt: number
}

/** What the database holds for the report, read without changing anything. */
interface Reading {
  readonly runners: RunnerRow[]
  readonly paused: { kind: string; pausedAt: number }[]
  /** Per kind with queued jobs: how many, and when the longest-waiting became due (epoch ms, the database's clock for PostgreSQL). */
  readonly queued: { kind: string; count: number; oldestDueAt: number }[]
  /** The database's clock, in epoch ms. */
  readonly now: number
}

/**
 * `jobtable doctor`: an operator's check of a deployment, read from the
 * database alone: the schema (as migrate --check), the live runners with
 * their releases and kinds, the kinds with queued jobs that no live
 * runner handles, the paused kinds, and the longest a queued job has
 * waited. Prints one JSON report and exits 1 when something needs a
 * person (each listed in `problems`, in words), 0 otherwise.
 *
 * It reads the tables directly rather than through a runner: a runner
 * knows only its own process, while the report is about every process on
 * the database, and opening one would migrate.
 */
export async function doctorCommand(ctx: CliContext): Promise<number> {
  const { values } = parse(ctx.args, { ...COMMON_FLAGS, 'max-wait': { type: 'string' } })
  if (values.help) {
    ctx.stdout.write(HELP.doctor)
    return EXIT.ok
  }
  const maxWaitMs = values['max-wait'] === undefined ? 5 * 60_000 : durationFlag('max-wait', values['max-wait'])
  const database = databaseOf(values.database, ctx.env)
  const schema = await checkSchema(database)
  const reading = schema.runs ? await read(database) : undefined
  const report = diagnose(schema, reading, maxWaitMs)
  ctx.stdout.write(`${JSON.stringify(report)}\n`)
  return report.problems.length === 0 ? EXIT.ok : EXIT.failure
}

/** The report: what was read, and the problems found in it. */
function diagnose(schema: SchemaCheck, reading: Reading | undefined, maxWaitMs: number) {
  const problems: string[] = []
  if (!schema.runs) problems.push(`schema: ${schema.advice}`)
  else if (schema.state === 'behind') problems.push(`schema: ${schema.advice}`)
  if (schema.drift.length > 0) problems.push(`schema drift: ${schema.drift.join(', ')}`)
  if (reading === undefined) return { schema, runners: [], pausedKinds: [], unhandledKinds: [], queued: [], problems }
  const handled = new Set(reading.runners.flatMap((r) => r.kinds))
  const paused = new Set(reading.paused.map((p) => p.kind))
  const unhandledKinds = reading.queued.filter((q) => !handled.has(q.kind) && !paused.has(q.kind)).map((q) => q.kind)
  if (unhandledKinds.length > 0) problems.push(`queued jobs of kinds no live runner handles: ${unhandledKinds.join(', ')} (they fail unknown_kind after the grace period)`)
  const queued = reading.queued.map((q) => ({ kind: q.kind, count: q.count, oldestWaitMs: Math.max(0, reading.now - q.oldestDueAt), paused: paused.has(q.kind) }))
  const late = queued.filter((q) => !q.paused && q.oldestWaitMs > maxWaitMs)
  if (late.length > 0) problems.push(`jobs waiting longer than ${maxWaitMs} ms: ${late.map((q) => `${q.kind} (${Math.round(q.oldestWaitMs / 1000)} s)`).join(', ')}`)
  const versions = [...new Set(reading.runners.map((r) => r.version ?? 'unrecorded'))]
  return { schema, runners: reading.runners, releases: versions, pausedKinds: reading.paused, unhandledKinds, queued, problems }
}

/** Reads the live runners, the paused kinds and the queue's age from the database. */
async function read(database: string): Promise<Reading> {
  if (isPostgresUrl(database)) return readPostgres(database)
  const { default: Database } = await import('better-sqlite3')
  const path = checkSqlitePath(database, 'existing')
  const db = new Database(path, { readonly: true, fileMustExist: true })
  try {
    // A runner on SQLite is alive while its lock file is held (src/sqlite/runner-locks.ts), not by a lease.
    // Loaded only now: a PostgreSQL user's command never loads better-sqlite3.
    const { RunnerLocks } = await import('../sqlite/runner-locks.js')
    const locks = new RunnerLocks(path)
    const rows = db.prepare('SELECT id, version, kinds, started_at AS startedAt, heartbeat_at AS heartbeatAt FROM jobtable_runners').all() as (Omit<RunnerRow, 'kinds'> & { kinds: string | null })[]
    const runners = rows.filter((r) => locks.isAlive(r.id)).map((r) => ({ ...r, kinds: r.kinds === null ? [] : (JSON.parse(r.kinds) as string[]) }))
    const paused = db.prepare('SELECT kind, paused_at AS pausedAt FROM jobtable_paused_kinds ORDER BY kind').all() as Reading['paused']
    // Reads every queued job once: an operator's command, not a hot path.
    const queued = db
      .prepare(`SELECT kind, count(*) AS count, min(max(created_at, coalesce(run_at, 0))) AS oldestDueAt FROM jobtable_jobs WHERE status = 'queued' GROUP BY kind ORDER BY kind`)
      .all() as Reading['queued']
    return { runners, paused, queued, now: Date.now() }
  } finally {
    db.close()
  }
}

async function readPostgres(database: string): Promise<Reading> {
  const schema = `"${schemaOf(database)}"`
  const client = await pgClientFor(database, 'doctor')
  try {
    const now = Number((await client.query<{ now: string }>(`SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now`)).rows[0]!.now)
    // A runner on PostgreSQL is alive while its lease has not expired, on the database's clock.
    const runners = (
      await client.query<{ id: string; version: string | null; kinds: string[] | null; startedAt: string; heartbeatAt: string }>(
        `SELECT id, version, kinds, started_at AS "startedAt", heartbeat_at AS "heartbeatAt" FROM ${schema}.runners WHERE expires_at >= $1`,
        [now],
      )
    ).rows.map((r) => ({ id: r.id, version: r.version, kinds: r.kinds ?? [], startedAt: Number(r.startedAt), heartbeatAt: Number(r.heartbeatAt) }))
    const paused = (await client.query<{ kind: string; pausedAt: string }>(`SELECT kind, paused_at AS "pausedAt" FROM ${schema}.paused_kinds ORDER BY kind`)).rows.map((r) => ({
      kind: r.kind,
      pausedAt: Number(r.pausedAt),
    }))
    const queued = (
      await client.query<{ kind: string; count: string; oldestDueAt: string }>(
        `SELECT kind, count(*) AS count, min(greatest(created_at, coalesce(run_at, 0))) AS "oldestDueAt" FROM ${schema}.jobs WHERE status = 'queued' GROUP BY kind ORDER BY kind`,
      )
    ).rows.map((r) => ({ kind: r.kind, count: Number(r.count), oldestDueAt: Number(r.oldestDueAt) }))
    return { runners, paused, queued, now }
  } catch (err) {
    throw pgFailure('doctor', err)
  } finally {
    await client.end().catch(() => undefined)
  }
}
