import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { DatabaseError } from 'jobtable'
import { postgres, type PostgresDriver } from 'jobtable/postgres'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'

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
        if (loseNextClaimAnswer && typeof text === 'string' && text.includes('SKIP LOCKED')) {
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
    (await pool.query<{ id: string; status: string }>(`SELECT id, status FROM "${schema}".jobs ORDER BY seq`)).rows.map((r) => `${r.id}:${r.status}`)

  it.each(['jobClaim', 'jobFinishManyAndClaim'] as const)(
    'via %s: the jobs it marked running are queued again before the next claim, and a job already handed out is not',
    async (method) => {
      await driver.runnerRegister({ runnerId: 'r1', now: 1 })
      const jobs = ['a', 'b', 'c', 'd'].map((id) => ({ id, kind: 'echo', payload: '{}', scope: null }))
      await driver.jobInsertMany({ jobs, now: 1 })
      const [a] = await driver.jobClaim({ limit: 1, runnerId: 'r1', now: 2 })
      expect(a).toMatchObject({ id: 'a', attempt: 1 })

      loseNextClaimAnswer = true
      const lost =
        method === 'jobClaim'
          ? driver.jobClaim({ limit: 2, runnerId: 'r1', now: 3 })
          : driver.jobFinishManyAndClaim({ finishes: [], now: 3, claim: { limit: 2, runnerId: 'r1' } })
      await expect(lost).rejects.toMatchObject({ dbCode: 'connection_lost', transient: true })
      await expect(lost).rejects.toBeInstanceOf(DatabaseError)
      // It committed: b and c are running, though no worker has them.
      expect(await statuses()).toEqual(['a:running', 'b:running', 'c:running', 'd:queued'])

      const next = await driver.jobClaim({ limit: 10, runnerId: 'r1', now: 4 })
      expect(next.map((j) => j.id)).toEqual(['b', 'c', 'd'])
      expect(await statuses()).toEqual(['a:running', 'b:running', 'c:running', 'd:running'])
    },
  )

  it('never hands out a job twice when the claim loop and a final write both claim after a claim in doubt', async () => {
    await driver.runnerRegister({ runnerId: 'r1', now: 1 })
    await driver.jobInsertMany({ jobs: [{ id: 'j', kind: 'echo', payload: '{}', scope: null }], now: 1 })
    loseNextClaimAnswer = true
    await expect(driver.jobClaim({ limit: 1, runnerId: 'r1', now: 2 })).rejects.toBeInstanceOf(DatabaseError)
    // Both claims see the claim in doubt; one's requeue must not put back what the other just took.
    let delayNext = true
    const connect = pool.connect.bind(pool) as (cb?: unknown) => Promise<pg.PoolClient>
    pool.connect = (async (cb?: unknown) => {
      if (cb === undefined && delayNext) {
        delayNext = false
        await new Promise((resolve) => setTimeout(resolve, 300)) // a pool slow to give a connection
      }
      return connect(cb)
    }) as typeof pool.connect
    const [viaFinisher, viaLoop] = await Promise.all([
      driver.jobFinishManyAndClaim({ finishes: [], now: 3, claim: { limit: 1, runnerId: 'r1' } }),
      driver.jobClaim({ limit: 1, runnerId: 'r1', now: 3 }),
    ])
    const handedOut = [...viaFinisher.claimed, ...viaLoop].map((j) => j.id)
    expect(handedOut).toEqual(['j'])
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL claim tests SKIPPED: ${skip}`)
