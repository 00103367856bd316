/**
 * How long a schema upgrade holds up workers on a large PostgreSQL jobs
 * table: a schema at the previous version with a million jobs (most of them
 * finished, some queued), workers claiming, finishing and enqueuing through
 * the statements a runner of that version uses, and this jobtable's
 * migrateSchema run in the middle. Reports the longest wait of any worker
 * statement before, during and after the upgrade, and for contrast the same
 * upgrade with its index built inside the migration's transaction (what a
 * plain CREATE INDEX holds).
 *
 *   npx tsx bench/migration-under-load.ts [--rows 1000000] [--url postgres://...]
 *
 * A measurement, not a test: its numbers go to BENCHMARKS.md.
 */
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import pg from 'pg'
import { MIGRATIONS, SCHEMA_VERSION, migrateSchema, migrationScripts } from '../src/postgres/migrations.js'

const { values } = parseArgs({ options: { rows: { type: 'string', default: '1000000' }, url: { type: 'string', default: 'postgres://postgres@127.0.0.1:5432/test' } } })
const ROWS = Number(values.rows)
const WORKERS = 4
const PREVIOUS = SCHEMA_VERSION - 1

interface Phase {
  name: string
  waits: number[]
}

async function main(): Promise<void> {
  for (const variant of ['concurrent', 'in-transaction'] as const) {
    const schema = `jt_migbench_${variant.replace('-', '_')}`
    const admin = new pg.Client({ connectionString: values.url })
    await admin.connect()
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    for (const script of migrationScripts(schema, 0, PREVIOUS)) await admin.query(script.sql)
    const fillStart = performance.now()
    await admin.query(
      `INSERT INTO ${schema}.jobs (id, kind, status, payload, created_at, updated_at, finished_at)
       SELECT 'j' || g, 'k' || (g % 5), CASE WHEN g % 100 = 0 THEN 'queued' ELSE 'succeeded' END, '{}', g, g,
              CASE WHEN g % 100 = 0 THEN NULL ELSE g END
         FROM generate_series(1, ${ROWS}) g`,
    )
    await admin.query(`ANALYZE ${schema}.jobs`)
    const fillMs = performance.now() - fillStart

    const phases: Phase[] = [{ name: 'before', waits: [] }, { name: 'during', waits: [] }, { name: 'after', waits: [] }]
    let phase = phases[0]!
    let running = true
    const pool = new pg.Pool({ connectionString: values.url, max: WORKERS + 1 })
    let seq = ROWS
    const worker = async (w: number): Promise<void> => {
      const client = await pool.connect()
      try {
        while (running) {
          const now = Date.now()
          let t = performance.now()
          const claimed = await client.query<{ c_seq: string }>(
            `SELECT c_seq FROM ${schema}.claim_jobs($1::text[], $2::integer[], $3::integer[], $4, $5, $6)`,
            [['k0', 'k1', 'k2', 'k3', 'k4'], [null, null, null, null, null], [null, null, null, null, null], 5, `bench-${w}`, now],
          )
          phase.waits.push(performance.now() - t)
          t = performance.now()
          await client.query(`UPDATE ${schema}.jobs SET status = 'succeeded', finished_at = $2, updated_at = $2 WHERE seq = ANY ($1::bigint[])`, [
            claimed.rows.map((r) => r.c_seq),
            now,
          ])
          phase.waits.push(performance.now() - t)
          t = performance.now()
          const id = `n${w}-${seq++}`
          await client.query(`INSERT INTO ${schema}.jobs (id, kind, payload, created_at, updated_at) VALUES ($1, 'k0', '{}', $2, $2)`, [id, now])
          phase.waits.push(performance.now() - t)
        }
      } finally {
        client.release()
      }
    }
    const workers = Array.from({ length: WORKERS }, (_, w) => worker(w))
    await new Promise((r) => setTimeout(r, 3000))
    phase = phases[1]!
    const migrator = new pg.Client({ connectionString: values.url })
    await migrator.connect()
    const upgradeStart = performance.now()
    if (variant === 'concurrent') {
      await migrateSchema(migrator, schema)
    } else {
      // The same upgrade with every index built inside its transaction, as a plain CREATE INDEX would be.
      const m = MIGRATIONS[SCHEMA_VERSION - 1]!
      const inline = m.concurrentIndexes?.(schema).map((i) => `CREATE INDEX IF NOT EXISTS ${i.name} ${i.definition}`).join(';\n') ?? ''
      await migrator.query(`BEGIN; ${m.sql(schema)}; ${inline}; COMMIT`)
    }
    const upgradeMs = performance.now() - upgradeStart
    await migrator.end()
    phase = phases[2]!
    await new Promise((r) => setTimeout(r, 2000))
    running = false
    await Promise.all(workers)
    await pool.end()
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    await admin.end()
    const summary = Object.fromEntries(
      phases.map((p) => {
        const sorted = [...p.waits].sort((a, b) => a - b)
        const at = (q: number) => Math.round((sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0) * 10) / 10
        return [p.name, { statements: sorted.length, p50_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1) }]
      }),
    )
    console.log(JSON.stringify({ workload: 'migration-under-load', variant, rows: ROWS, from: PREVIOUS, to: SCHEMA_VERSION, fill_ms: Math.round(fillMs), upgrade_ms: Math.round(upgradeMs), ...summary }))
  }
}

await main()
