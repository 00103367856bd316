/**
 * What `runner.counts()` costs on a big table: `npm run build && npx tsx bench/counts.ts [options]`.
 *
 *   --backend sqlite|postgres|both   default both (postgres skipped, saying why, when unreachable)
 *   --rows N                         jobs seeded, default 1000000
 *   --repeat N                       runs per statement, medians reported; default 3
 *
 * Seeds N jobs by SQL on jobtable's own schema: 95% succeeded, 3% failed,
 * 1% cancelled, 0.8% queued, 0.2% scheduled, a few running; 5 kinds; 60%
 * without a scope, 20% in one scope `big`, 20% over 1,000 small scopes.
 * Then times, per scope (every job, `big`, the unscoped ones, one small
 * scope):
 *
 * - `before`: the statement jobtable ran before (a GROUP BY over every job
 *   of the scope), on a connection of its own. On SQLite this is also how
 *   long it held the event loop.
 * - `exact`: the statement the driver runs now for an exact count (for
 *   every job, each status from its own partial index).
 * - `probe`: the size probe that tells a small scope from a big one.
 * - SQLite `driver first`: the first `jobCounts` of the driver (dist/), which
 *   waits for a snapshot taken on its worker thread; with the longest the
 *   event loop went without a turn meanwhile (a 1 ms interval's largest gap).
 * - `driver again`: the next call, answered from that snapshot.
 * - `idle 300 ms`: the longest gap of the same interval during a 300 ms
 *   sleep with nothing else running, this machine's own noise.
 * - PostgreSQL `cache first` / `cache again`: the same through a
 *   CountsCache (src/counts-cache.ts) over the PostgreSQL statements, as
 *   its driver would hold one.
 *
 * Prints one JSON line per measurement and a table. Nothing asserts a time.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import { migrate, sqlite } from 'jobtable/sqlite'
import { postgres } from 'jobtable/postgres'
import type { JobCount } from 'jobtable'
import * as sqliteSql from '../src/sqlite/queries.js'
import { queries as postgresQueries } from '../src/postgres/queries.js'
import { CountsCache } from '../src/counts-cache.js'
import { newJobId } from '../src/id.js'
import { median } from './stats.js'

const args = process.argv.slice(2)
const flag = (name: string, fallback: string) => {
  const i = args.indexOf(`--${name}`)
  return i >= 0 && i + 1 < args.length ? args[i + 1]! : fallback
}
const backend = flag('backend', 'both')
const rows = Number(flag('rows', '1000000'))
const repeat = Number(flag('repeat', '3'))
const PG_URL = process.env['JOBTABLE_BENCH_PG'] ?? 'postgres://postgres@127.0.0.1:5432/test'

/** The scopes timed: every job, the big scope, the unscoped jobs, one small scope. */
const SCOPES: readonly (string | null | undefined)[] = [undefined, 'big', null, 't5']
const scopeName = (scope: string | null | undefined) => (scope === undefined ? 'every job' : scope === null ? 'unscoped' : scope)

interface Row {
  backend: string
  scope: string
  what: string
  ms: number
  loop_max_gap_ms?: number
}
const results: Row[] = []
function report(row: Row): void {
  results.push(row)
  console.log(JSON.stringify(row))
}

/** Median wall time of `repeat` runs of `fn`. */
async function timed(fn: () => unknown): Promise<number> {
  const times: number[] = []
  for (let i = 0; i < repeat; i++) {
    const t = performance.now()
    await fn()
    times.push(performance.now() - t)
  }
  return median(times)
}

/** Runs `fn`, timing it and the longest gap between the ticks of a 1 ms interval meanwhile (what the event loop was held for). */
async function withLoopGap<T>(fn: () => Promise<T>): Promise<{ ms: number; gap: number; value: T }> {
  let last = performance.now()
  let gap = 0
  const ticker = setInterval(() => {
    const now = performance.now()
    gap = Math.max(gap, now - last)
    last = now
  }, 1)
  const t = performance.now()
  const value = await fn()
  const ms = performance.now() - t
  gap = Math.max(gap, performance.now() - last)
  clearInterval(ticker)
  return { ms, gap, value }
}

/** The seeded job i's kind, status and scope: the same distribution on both backends. */
function jobAt(i: number, random: () => number): { kind: string; status: string; scope: string | null } {
  const r = random()
  const status = r < 0.95 ? 'succeeded' : r < 0.98 ? 'failed' : r < 0.99 ? 'cancelled' : r < 0.998 ? 'queued' : r < 0.9981 ? 'running' : 'scheduled'
  const s = random()
  return { kind: `kind_${i % 5}`, status, scope: s < 0.6 ? null : s < 0.8 ? 'big' : `t${Math.floor(random() * 1000)}` }
}

function seeded(seed: number): () => number {
  let x = seed
  return () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32)
}

const PAYLOAD = JSON.stringify({ household: 'h-123456', week: '2026-W48', recipes: [1, 2, 3, 4, 5, 6, 7], note: 'x'.repeat(60) })
const RESULT = JSON.stringify({ ok: true, items: 12, summary: 'y'.repeat(40) })

async function benchSqlite(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'jobtable-bench-counts-'))
  const path = join(dir, 'jobs.db')
  try {
    const db = new Database(path)
    db.pragma('journal_mode = WAL')
    db.pragma('synchronous = NORMAL')
    migrate(db)
    const t0 = performance.now()
    const insert = db.prepare(`INSERT INTO jobtable_jobs (id, kind, status, payload, result, error, attempt, runner_id, created_at, updated_at, started_at, finished_at, scope, run_at)
      VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)`)
    const random = seeded(12345)
    const now = Date.now()
    db.transaction(() => {
      for (let i = 0; i < rows; i++) {
        const at = now - rows + i
        const { kind, status, scope } = jobAt(i, random)
        const terminal = status === 'succeeded' || status === 'failed' || status === 'cancelled'
        insert.run(newJobId(at), kind, status, PAYLOAD, status === 'succeeded' ? RESULT : null, status === 'failed' ? 'boom' : null,
          status === 'running' ? 'r1' : null, at, at, terminal || status === 'running' ? at : null, terminal ? at : null, scope, status === 'scheduled' ? now + 3_600_000 : null)
      }
    })()
    db.pragma('wal_checkpoint(TRUNCATE)')
    console.error(`sqlite: seeded ${rows} jobs in ${((performance.now() - t0) / 1000).toFixed(1)} s`)

    const before = {
      all: db.prepare('SELECT kind, status, count(*) AS count FROM jobtable_jobs GROUP BY kind, status'),
      scoped: db.prepare(sqliteSql.countScopedJobs),
    }
    const exact = { all: db.prepare(sqliteSql.countJobs), scoped: db.prepare(sqliteSql.countScopedJobs) }
    const probe = { all: db.prepare(sqliteSql.countJobsUpTo), scoped: db.prepare(sqliteSql.countScopedJobsUpTo) }
    for (const scope of SCOPES) {
      const name = scopeName(scope)
      report({ backend: 'sqlite', scope: name, what: 'before', ms: await timed(() => (scope === undefined ? before.all.all() : before.scoped.all({ scope }))) })
      if (scope === undefined) report({ backend: 'sqlite', scope: name, what: 'exact', ms: await timed(() => exact.all.all()) })
      report({ backend: 'sqlite', scope: name, what: 'probe', ms: await timed(() => (scope === undefined ? probe.all.get({ limit: 10_001 }) : probe.scoped.get({ scope, limit: 10_001 }))) })
    }
    db.close()

    // How long the event loop goes without a turn when nothing runs: this machine's own noise, the reference for the gaps below.
    const idle = await withLoopGap(() => new Promise((resolve) => setTimeout(resolve, 300)))
    report({ backend: 'sqlite', scope: '-', what: 'idle 300 ms', ms: idle.ms, loop_max_gap_ms: idle.gap })
    // The driver as users get it: a fresh one per scope, so each first call takes its own snapshot.
    for (const scope of SCOPES) {
      const driver = sqlite({ path })
      try {
        const params = scope === undefined ? {} : { scope }
        const first = await withLoopGap(() => driver.jobCounts(params))
        report({ backend: 'sqlite', scope: scopeName(scope), what: 'driver first', ms: first.ms, loop_max_gap_ms: first.gap })
        const again = await withLoopGap(() => driver.jobCounts(params))
        report({ backend: 'sqlite', scope: scopeName(scope), what: 'driver again', ms: again.ms, loop_max_gap_ms: again.gap })
      } finally {
        await driver.close()
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

async function benchPostgres(): Promise<void> {
  const schema = `bench_counts_${process.pid}`
  const admin = new pg.Client({ connectionString: PG_URL })
  try {
    await admin.connect()
  } catch (err) {
    console.error(`postgres skipped: cannot connect to ${PG_URL} (${(err as Error).message}); set JOBTABLE_BENCH_PG`)
    return
  }
  try {
    const driver = postgres({ connectionString: PG_URL, schema })
    await driver.migrate()
    await driver.close()
    const t0 = performance.now()
    const random = seeded(12345)
    const now = Date.now()
    await admin.query(`ALTER TABLE "${schema}".jobs DISABLE TRIGGER USER`)
    for (let from = 0; from < rows; from += 50_000) {
      const cols: unknown[][] = [[], [], [], [], []]
      for (let i = from; i < Math.min(rows, from + 50_000); i++) {
        const { kind, status, scope } = jobAt(i, random)
        cols[0]!.push(newJobId(now - rows + i))
        cols[1]!.push(kind)
        cols[2]!.push(status)
        cols[3]!.push(scope)
        cols[4]!.push(now - rows + i)
      }
      await admin.query(
        `INSERT INTO "${schema}".jobs (id, kind, status, payload, result, attempt, runner_id, created_at, updated_at, started_at, finished_at, scope, run_at)
         SELECT t.id, t.kind, t.status, $6, CASE WHEN t.status = 'succeeded' THEN $7::jsonb END, 1, CASE WHEN t.status = 'running' THEN 'r1' END, t.at, t.at,
                CASE WHEN t.status NOT IN ('queued', 'scheduled') THEN t.at END, CASE WHEN t.status IN ('succeeded', 'failed', 'cancelled') THEN t.at END, t.scope,
                CASE WHEN t.status = 'scheduled' THEN t.at + 3600000 END
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[]) AS t(id, kind, status, scope, at)`,
        [...cols, PAYLOAD, RESULT],
      )
    }
    await admin.query(`ALTER TABLE "${schema}".jobs ENABLE TRIGGER USER`)
    await admin.query(`VACUUM ANALYZE "${schema}".jobs`)
    console.error(`postgres: seeded ${rows} jobs in ${((performance.now() - t0) / 1000).toFixed(1)} s (then VACUUM ANALYZE)`)

    const q = postgresQueries(`"${schema}"`)
    const query = async (text: string, values: unknown[]) => (await admin.query(text, values)).rows
    const countNow = (scope: string | null | undefined) =>
      query(scope === undefined ? q.countJobs : scope === null ? q.countUnscopedJobs : q.countScopedJobs, scope === undefined || scope === null ? [] : [scope]) as Promise<JobCount[]>
    for (const scope of SCOPES) {
      const name = scopeName(scope)
      const beforeText = scope === undefined ? `SELECT kind, status, count(*)::float8 AS count FROM "${schema}".jobs GROUP BY kind, status` : null
      report({ backend: 'postgres', scope: name, what: 'before', ms: await timed(() => (beforeText !== null ? query(beforeText, []) : countNow(scope))) })
      if (scope === undefined) report({ backend: 'postgres', scope: name, what: 'exact', ms: await timed(() => countNow(undefined)) })
      const probe = scope === undefined ? [q.countJobsUpTo, [10_001]] : scope === null ? [q.countUnscopedJobsUpTo, [10_001]] : [q.countScopedJobsUpTo, [scope, 10_001]]
      report({ backend: 'postgres', scope: name, what: 'probe', ms: await timed(() => query(probe[0] as string, probe[1] as unknown[])) })
      const cache = new CountsCache({
        size: async (s, limit) =>
          ((await query(s === undefined ? q.countJobsUpTo : s === null ? q.countUnscopedJobsUpTo : q.countScopedJobsUpTo, s === undefined || s === null ? [limit] : [s, limit])) as { n: number }[])[0]!.n,
        exact: countNow,
        snapshot: countNow,
      })
      const first = await withLoopGap(() => cache.read(scope))
      report({ backend: 'postgres', scope: name, what: 'cache first', ms: first.ms })
      const again = await withLoopGap(() => cache.read(scope))
      report({ backend: 'postgres', scope: name, what: 'cache again', ms: again.ms })
    }
  } finally {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined)
    await admin.end()
  }
}

if (backend === 'sqlite' || backend === 'both') await benchSqlite()
if (backend === 'postgres' || backend === 'both') await benchPostgres()

const idle = results.find((r) => r.what === 'idle 300 ms')
if (idle !== undefined) console.log(`\nThe event loop's longest gap with nothing running (a 300 ms sleep): ${idle.loop_max_gap_ms!.toFixed(1)} ms`)
const cell = (r: Row | undefined) => (r === undefined ? '' : r.ms < 10 ? r.ms.toFixed(2) : r.ms.toFixed(0))
console.log(`\n${rows.toLocaleString('en-US')} jobs, medians of ${repeat} (ms; "first" and "again" once each)\n`)
console.log('| backend | scope | before | exact statement | size probe | first call (snapshot) | loop held, first call | next call | loop held, next call |')
console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|')
for (const b of ['sqlite', 'postgres']) {
  for (const scope of SCOPES) {
    const name = scopeName(scope)
    const of = (what: string) => results.find((r) => r.backend === b && r.scope === name && r.what === what)
    const first = of(b === 'sqlite' ? 'driver first' : 'cache first')
    const again = of(b === 'sqlite' ? 'driver again' : 'cache again')
    if (first === undefined) continue
    const gap = (r: Row | undefined) => (r?.loop_max_gap_ms === undefined ? '' : r.loop_max_gap_ms.toFixed(1))
    console.log(`| ${b} | ${name} | ${cell(of('before'))} | ${cell(of('exact'))} | ${cell(of('probe'))} | ${cell(first)} | ${b === 'sqlite' ? gap(first) : ''} | ${cell(again)} | ${b === 'sqlite' ? gap(again) : ''} |`)
  }
}
