/**
 * Does PostgreSQL's autovacuum keep up with retention? `npx tsx
 * bench/postgres-vacuum.ts [--rows N] [--cycles N]`. Not part of `npm run
 * bench`: it takes about a minute per cycle, waiting for autovacuum.
 *
 * It starts a PostgreSQL server of its own in a temporary directory
 * (test/support/private-postgres.ts: initdb's defaults, so autovacuum on
 * with its default naptime of 1 min and scale factor 0.2, fsync off), so
 * the shared server's settings (autovacuum may be off there) and other
 * sessions' tables count for nothing. Then, cycle after cycle, as a
 * deployment whose retention deletes yesterday's jobs while today's
 * finish: it inserts N finished jobs by SQL, deletes the N of the cycle
 * before through a runner's `prune()` (the maintenance pass's code, 1,000
 * rows a statement), and waits for autovacuum to visit the table (at most
 * 3 min from the prune, polled every 2 s). It prints, per cycle, the table's size with its indexes, its
 * live and dead tuples before and after autovacuum, and how long
 * autovacuum took to come. The table should stop growing once the first
 * deleted rows' space is reused.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { Runner } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { newJobId } from '../src/id.js'
import { startPrivatePostgres } from '../test/support/private-postgres.js'

const arg = (name: string, fallback: number): number => {
  const at = process.argv.indexOf(`--${name}`)
  const value = at >= 0 ? Number(process.argv[at + 1]) : fallback
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`)
  return value
}
const ROWS = arg('rows', 100_000)
const CYCLES = arg('cycles', 4)
const SCHEMA = 'jobtable'
const silent = { debug() {}, info() {}, warn() {}, error() {} }

interface Stats {
  live: number
  dead: number
  mb: number
  autovacuums: number
  lastAutovacuum: string | null
}

async function stats(admin: pg.Pool): Promise<Stats> {
  const { rows } = await admin.query<{ live: string; dead: string; bytes: string; autovacuums: string; last: string | null }>(
    `SELECT n_live_tup AS live, n_dead_tup AS dead, pg_total_relation_size(relid) AS bytes, autovacuum_count AS autovacuums, last_autovacuum::text AS last
       FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'jobs'`,
    [SCHEMA],
  )
  const r = rows[0]!
  return { live: Number(r.live), dead: Number(r.dead), mb: Number(r.bytes) / 2 ** 20, autovacuums: Number(r.autovacuums), lastAutovacuum: r.last }
}

/** Inserts `rows` succeeded jobs finished at `at`, 50,000 a statement, as bench/backend-postgres.ts seeds them. */
async function seed(admin: pg.Pool, rows: number, at: number): Promise<void> {
  for (let start = 0; start < rows; start += 50_000) {
    const count = Math.min(50_000, rows - start)
    const ids = Array.from({ length: count }, (_, i) => newJobId(at - rows + start + i))
    await admin.query(
      `INSERT INTO "${SCHEMA}".jobs (id, kind, status, payload, result, attempt, runner_id, created_at, updated_at, started_at, finished_at)
       SELECT t.id, 'noop', 'succeeded', '{"n":0}', 'null', 1, 'old-runner', $2::bigint, $2::bigint, $2::bigint, $2::bigint
         FROM unnest($1::text[]) AS t(id)`,
      [ids, at],
    )
  }
}

const server = await startPrivatePostgres()
try {
  const admin = new pg.Pool({ connectionString: server.url, max: 2 })
  const settings = await admin.query<{ name: string; setting: string }>(
    `SELECT name, setting FROM pg_settings WHERE name IN ('autovacuum', 'autovacuum_naptime', 'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_threshold', 'server_version')`,
  )
  console.log(settings.rows.map((r) => `${r.name}=${r.setting}`).join(' '))
  const DAY = 86_400_000
  let day = Date.UTC(2030, 0, 1)
  const runner = new Runner({ driver: postgres({ connectionString: server.url, schema: SCHEMA }), logger: silent, clock: () => day, retention: false })
  await runner.driver.migrate?.()
  await seed(admin, ROWS, day - DAY)
  await admin.query(`VACUUM ANALYZE "${SCHEMA}".jobs`)
  console.log(`start: ${ROWS} finished jobs, ${JSON.stringify(await stats(admin))}`)
  for (let cycle = 1; cycle <= CYCLES; cycle++) {
    // Today's jobs finish; yesterday's (older than one day) go.
    await seed(admin, ROWS, day)
    day += DAY - 1
    const t0 = performance.now()
    const deleted = await runner.prune({ olderThanMs: DAY - 1 })
    const prunedAt = performance.now()
    const pruneS = (prunedAt - t0) / 1000
    day += 1
    // The deleting connection reports its counts once idle for 10 s at most (PostgreSQL 15).
    await sleep(12_000)
    const pruned = await stats(admin)
    let vacuumed = pruned
    while (vacuumed.autovacuums === pruned.autovacuums && performance.now() - prunedAt < 180_000) {
      await sleep(2_000)
      vacuumed = await stats(admin)
    }
    const waitedS = (performance.now() - prunedAt) / 1000
    console.log(
      `cycle ${cycle}: inserted ${ROWS}, pruned ${deleted} in ${pruneS.toFixed(1)} s (${Math.round(deleted / pruneS)}/s); ` +
        `after the prune ${pruned.mb.toFixed(1)} MB, ${pruned.live} live, ${pruned.dead} dead; ` +
        (vacuumed.autovacuums > pruned.autovacuums
          ? `autovacuum came within ${waitedS.toFixed(0)} s of the prune: ${vacuumed.mb.toFixed(1)} MB, ${vacuumed.live} live, ${vacuumed.dead} dead`
          : `no autovacuum within ${waitedS.toFixed(0)} s of the prune`),
    )
  }
  await runner.close()
  await admin.end()
} finally {
  await server.destroy()
}
