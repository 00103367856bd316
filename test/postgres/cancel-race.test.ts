import pg from 'pg'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { Runner } from 'jobtable'
import { postgres, type PostgresDriver } from 'jobtable/postgres'
import { PG_URL, postgresBackend, testSchema } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { gate, track } from '../support/wait.js'

const skip = postgresBackend().skip

/**
 * runner.cancel() on PostgreSQL is several statements (cancel a waiting
 * job; else request the cancellation of a running one; else read it). A
 * job that moves between them (a running job whose handler fails with a
 * retried code goes back to the queue) must still be cancelled, never
 * answered 'terminal' while it waits to run again.
 */
describe.skipIf(skip !== undefined)('postgres: a cancellation racing a retry write', () => {
  let schema: string
  let pool: pg.Pool
  let driver: PostgresDriver
  /** When set, the next cancel-waiting statement runs for real; its answer is held until `resume` opens. */
  let hold: { reached: () => void; resume: Promise<void> } | undefined

  beforeEach(() => {
    schema = testSchema()
    pool = new pg.Pool({ connectionString: PG_URL, max: 4 })
    const connect = pool.connect.bind(pool) as (cb?: unknown) => Promise<pg.PoolClient>
    pool.connect = (async (cb?: unknown) => {
      if (cb !== undefined) return connect(cb)
      const client = await connect()
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>
      ;(client as unknown as { query: unknown }).query = async (...args: unknown[]) => {
        const result = await query(...args)
        const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: unknown } | undefined)?.text
        if (hold !== undefined && typeof text === 'string' && text.includes("SET status = 'cancelled'") && text.includes("IN ('queued', 'scheduled')")) {
          const { reached, resume } = hold
          hold = undefined
          reached()
          await resume
        }
        return result
      }
      return client
    }) as typeof pool.connect
    // Neither notifications nor polls: nothing but the test's own calls moves the job.
    driver = postgres({ pool, schema, listen: false, pollIntervalMs: 3_600_000 })
  })
  afterEach(async () => {
    await driver.close()
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    await pool.end()
  })

  it('a running job that goes back to the queue (a retried failure) after cancel() found it not waiting: it is cancelled, not answered "terminal"', async () => {
    const runner = new Runner({ driver, workers: 1, logger: captureLogs() })
    const release = gate()
    const kind = runner.register('flaky', {
      payload: echoPayload,
      failures: ['busy'],
      // Retried an hour (at least half of it) later: it does not run again within the test.
      retry: { maxAttempts: 3, codes: ['busy'], backoff: { baseMs: 3_600_000, maxMs: 3_600_000 } },
      handler: async (_p, job) => {
        await release.promise
        return job.fail('busy')
      },
    })
    const done = track(runner)
    await runner.start()
    try {
      const id = await kind.enqueue({ n: 1 })
      await done.starts(1)

      const reached = gate()
      const resume = gate()
      hold = { reached: () => reached.open(), resume: resume.promise }
      const cancelling = runner.cancel(id)
      // cancel() found the job running, not waiting.
      await reached.promise
      // Its handler now fails with a retried code: its retry write sends it back to the queue, scheduled.
      release.open()
      await done.ends([id])
      expect(await runner.get(id)).toMatchObject({ status: 'scheduled', attempt: 1 })
      resume.open()

      const result = await cancelling
      const job = await runner.get(id)
      expect([result, job.status]).toEqual(['cancelled', 'cancelled'])
    } finally {
      release.open()
      done.stop()
      await runner.stop()
    }
  })
})
