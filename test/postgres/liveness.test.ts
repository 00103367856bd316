import { describe, expect, it } from 'vitest'
import { CODE_INTERRUPTED, Runner } from 'jobtable'
import { postgres, type PostgresOptions } from 'jobtable/postgres'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'
import { gate, track } from '../support/wait.js'
import { eventually } from '../multiprocess/processes.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: runner liveness and crash recovery', () => {
  const t = pgSchemaPerTest()
  const driver = (options: Partial<PostgresOptions> = {}) => {
    const d = postgres({ connectionString: PG_URL, schema: t.schema, ...options })
    t.closeAfter(d)
    return d
  }
  const runner = (d: ReturnType<typeof driver> | FaultyDriver['driver'], logs = captureLogs()) => {
    const r = new Runner({ driver: d, workers: 2, logger: logs })
    t.closeAfter(r)
    return r
  }
  const statusOf = async (id: string) =>
    (await t.admin.query<{ status: string; error: string | null }>(`SELECT status, error FROM "${t.schema}".jobs WHERE id = $1`, [id])).rows[0]

  it("a live runner's running job survives many sweeps by another runner while its short lease is renewed", async () => {
    const liveDriver = new FaultyDriver(driver({ leaseMs: 300 }))
    const live = runner(liveDriver.driver)
    const release = gate()
    const kind = live.register('echo', { payload: echoPayload, handler: () => release.promise })
    const done = track(live)
    await live.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)

    const sweeper = new FaultyDriver(driver({ leaseMs: 300, sweepIntervalMs: 5 }))
    const other = runner(sweeper.driver)
    other.register('echo', { payload: echoPayload, handler: () => undefined })
    await other.start()
    // Five renewals span more than the 300 ms lease: without them it would have lapsed.
    await eventually(async () => (liveDriver.calls['runnerHeartbeat'] ?? 0) >= 5 && (sweeper.calls['jobFailInterrupted'] ?? 0) >= 20, 20)
    expect(await statusOf(id)).toEqual({ status: 'running', error: null })
    release.open()
    await done.ends([id])
    expect(await statusOf(id)).toEqual({ status: 'succeeded', error: null })
  })

  it('start fails the running jobs of a runner whose lease lapsed and of an unregistered one, never those of a live lease', async () => {
    const d = driver()
    const jobs = ['of-dead', 'of-live', 'of-ghost'].map((id) => ({ id, kind: 'echo', payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }))
    await d.jobInsertMany({ jobs, now: 1 })
    await d.runnerRegister({ runnerId: 'dead', kinds: ['echo'], now: 1 })
    await d.runnerRegister({ runnerId: 'live', kinds: ['echo'], now: 1 })
    await d.jobClaim({ limit: 1, runnerId: 'dead', kinds: ['echo'], now: 2 })
    await d.jobClaim({ limit: 1, runnerId: 'live', kinds: ['echo'], now: 2 })
    // A runner that stopped and unregistered, leaving a job it could not finish.
    await d.jobClaim({ limit: 1, runnerId: 'ghost', kinds: ['echo'], now: 2 })
    await t.admin.query(`UPDATE "${t.schema}".runners SET expires_at = 0 WHERE id = 'dead'`)

    const logs = captureLogs()
    const starting = runner(driver(), logs)
    starting.register('echo', { payload: echoPayload, handler: () => undefined })
    await starting.start()
    expect(await statusOf('of-dead')).toEqual({ status: 'failed', error: CODE_INTERRUPTED })
    expect(await statusOf('of-ghost')).toEqual({ status: 'failed', error: CODE_INTERRUPTED })
    expect(await statusOf('of-live')).toEqual({ status: 'running', error: null })
    expect(logs.lines).toContainEqual({ level: 'warn', fields: { count: 2 }, message: 'failed jobs interrupted by restart' })
    const registered = await t.admin.query<{ id: string }>(`SELECT id FROM "${t.schema}".runners ORDER BY id`)
    expect(registered.rows.map((r) => r.id).sort()).toEqual(['live', starting.id].sort())
  })

  it('a runner whose lease was taken away cannot finish the job another runner failed, and registers again', async () => {
    const logs = captureLogs()
    const slow = runner(driver({ leaseMs: 3_000 }), logs)
    const release = gate()
    const kind = slow.register('echo', { payload: echoPayload, result: (r: string) => r, handler: () => release.promise.then(() => 'late') })
    const done = track(slow)
    await slow.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)
    // The slow runner's lease lapses (as if it had stalled past it).
    await t.admin.query(`UPDATE "${t.schema}".runners SET expires_at = 0 WHERE id = $1`, [slow.id])
    const other = runner(driver())
    other.register('echo', { payload: echoPayload, handler: () => undefined })
    await other.start()
    expect(await statusOf(id)).toEqual({ status: 'failed', error: CODE_INTERRUPTED })

    release.open()
    await done.ends([id])
    // The fence refused the late success.
    expect(await statusOf(id)).toEqual({ status: 'failed', error: CODE_INTERRUPTED })
    expect(logs.lines.some((l) => l.fields.job_id === id && /not running under this claim/.test(l.message))).toBe(true)
    await eventually(async () => logs.lines.some((l) => /lease was lost/.test(l.message)), 50)
    await eventually(async () => ((await t.admin.query(`SELECT 1 FROM "${t.schema}".runners WHERE id = $1`, [slow.id])).rowCount ?? 0) === 1, 50)
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL liveness tests SKIPPED: ${skip}`)
