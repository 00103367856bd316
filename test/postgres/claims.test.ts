import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { postgres, type PostgresDriver } from 'jobtable/postgres'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { gate, track } from '../support/wait.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: a claim whose answer is lost', () => {
  let schema: string
  let pool: pg.Pool
  let driver: PostgresDriver
  /** When set, the next claim statement runs for real, then its answer is "lost" as when the connection drops. */
  let loseNextClaimAnswer = false

  beforeEach(() => {
    schema = testSchema()
    pool = new pg.Pool({ connectionString: PG_URL, max: 3 })
    // Fault injection around the real database: the statement commits; only its answer is lost.
    const connect = pool.connect.bind(pool) as (cb?: unknown) => Promise<pg.PoolClient>
    pool.connect = (async (cb?: unknown) => {
      // pool.query (the test's own reads) connects with a callback: leave it be.
      if (cb !== undefined) return connect(cb)
      const client = await connect()
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>
      ;(client as unknown as { query: unknown }).query = async (...args: unknown[]) => {
        const result = await query(...args)
        // The statement's text, whether sent as a string or as a (prepared) query config.
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text
        if (loseNextClaimAnswer && typeof text === 'string' && text.includes('claim_jobs(')) {
          loseNextClaimAnswer = false
          throw new Error('Connection terminated unexpectedly')
        }
        return result
      }
      return client
    }) as typeof pool.connect
    driver = postgres({ pool, schema })
  })
  afterEach(async () => {
    await driver.close()
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await pool.end()
  })

  const statuses = async () =>
    (await pool.query<{ id: string; status: string }>(`SELECT id, status FROM "${schema}".jobs ORDER BY seq`)).rows.map((r) => r.status)

  it.each(['the claim loop', 'a final write'] as const)(
    'a claim by %s whose answer is lost with its connection: its jobs are queued again, each handler starts exactly once',
    async (via) => {
      const runner = new Runner({ driver, workers: 2, logger: captureLogs() })
      const ledger = new Map<string, number>()
      const release = gate()
      const kind = runner.register('echo', {
        payload: echoPayload,
        handler: async ({ n }, job) => {
          ledger.set(job.id, (ledger.get(job.id) ?? 0) + 1)
          // The first job's final write carries the claim whose answer is lost.
          if (via === 'a final write' && n === 0) loseNextClaimAnswer = true
          if (n === 1) await release.promise
        },
      })
      const done = track(runner)
      const ids = await kind.enqueueMany([0, 1, 2, 3, 4].map((n) => ({ n })))
      if (via === 'the claim loop') loseNextClaimAnswer = true
      await runner.start()
      release.open()
      await done.ends(ids)
      expect([...ledger.values()]).toEqual([1, 1, 1, 1, 1])
      expect(ledger.size).toBe(5)
      expect(await statuses()).toEqual(Array(5).fill('succeeded'))
      expect(loseNextClaimAnswer).toBe(false) // the fault did fire
      await runner.stop()
    },
  )
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL claim tests SKIPPED: ${skip}`)
