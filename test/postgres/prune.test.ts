import { describe, expect, it } from 'vitest'
import { postgres } from 'jobtable/postgres'
import { queries } from '../../src/postgres/queries.js'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: the prune', () => {
  const t = pgSchemaPerTest()

  it('reads only the index of terminal jobs, on the generic plan its prepared statements run on, beside a big queue', async () => {
    const driver = t.closeAfter(postgres({ connectionString: PG_URL, schema: t.schema }))
    await driver.migrate()
    const s = `"${t.schema}"`
    // 100,000 queued jobs and 10,000 terminal ones of five kinds.
    await t.admin.query(`
      INSERT INTO ${s}.jobs (id, kind, status, payload, created_at, updated_at, finished_at)
      SELECT 'j' || i, 'k' || (i % 5), CASE WHEN i % 11 = 0 THEN (ARRAY['succeeded', 'failed', 'cancelled'])[1 + i % 3] ELSE 'queued' END,
             '{}', i, i, CASE WHEN i % 11 = 0 THEN i END
        FROM generate_series(1, 110000) AS i`)
    await t.admin.query(`ANALYZE ${s}.jobs`)
    const q = queries(s)
    const client = await t.admin.connect()
    try {
      // What the driver's named prepared statements run once PostgreSQL settles on a generic plan.
      await client.query('SET plan_cache_mode = force_generic_plan')
      for (const [name, text, args] of [
        ['prune', q.pruneJobs, `('k1', ARRAY['succeeded', 'failed'], 1000, 1000)`],
        ['kinds', q.finishedKinds, ''],
      ] as const) {
        await client.query(`PREPARE ${name} AS ${text}`)
        const plan = (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN EXECUTE ${name}${args}`)).rows.map((r) => r['QUERY PLAN']).join('\n')
        expect(plan, plan).toMatch(/jobs_terminal/)
        expect(plan, plan).not.toMatch(/Seq Scan|jobs_queued|jobs_scope|jobs_unique/)
      }
      expect((await client.query(`EXECUTE prune('k1', ARRAY['succeeded', 'failed'], 1000000, 1000)`)).rowCount).toBe(1000)
      expect((await client.query(`EXECUTE kinds`)).rows.map((r) => r.kind)).toEqual(['k0', 'k1', 'k2', 'k3', 'k4'])
    } finally {
      client.release()
    }
  })
})
