import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { DatabaseError, type Driver, type JobFinish, type NewJob } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'
import { faultyPool, hookSqlite, type NativeFault, pgError, sqliteError, withFault } from '../reliability/support/faults-native.js'

/**
 * A batch of final writes that sends some jobs back (a retry, a snooze)
 * and ends others is one transaction on both backends: whichever of its
 * statements fails with a transient error, nothing of the batch is
 * applied, so the runner's retry of the whole batch applies every write
 * once. Were the send-backs committed by a statement of their own before
 * the final writes failed, the batch's retry would find them applied
 * already and answer them as "not running under this claim" (the
 * completer logs each as fenced), and a job sent back could even be
 * claimed again in between.
 *
 * The faults are raised beneath the driver, where the database library
 * raises them (faults-native.ts): the nth statement the driver sends
 * within one call (BEGIN, COMMIT and ROLLBACK aside) fails before it runs.
 */

interface Opened {
  readonly driver: Driver
  drop(): Promise<void>
}

const backends: { name: string; skip?: string; error: NativeFault['error']; open(): Promise<Opened> }[] = [
  {
    name: 'sqlite',
    error: sqliteError('SQLITE_BUSY'),
    async open() {
      hookSqlite()
      const dir = mkdtempSync(join(tmpdir(), 'jobtable-defects-'))
      const driver = sqlite({ path: join(dir, 'jobs.db'), pollIntervalMs: 3_600_000 })
      return {
        driver,
        async drop() {
          await driver.close()
          rmSync(dir, { recursive: true, force: true })
        },
      }
    },
  },
  {
    name: 'postgres',
    skip: postgresSkipReason,
    error: pgError('40001'),
    async open() {
      const schema = testSchema()
      const pool = faultyPool(PG_URL)
      const driver = postgres({ pool, schema, listen: false, pollIntervalMs: 3_600_000 })
      return {
        driver,
        async drop() {
          await driver.close()
          await pool.end()
          // The pool's own query() goes through its connect, which the fault hook replaced: a client of its own drops the schema.
          const admin = new pg.Client({ connectionString: PG_URL })
          await admin.connect()
          await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => undefined)
          await admin.end()
        },
      }
    },
  },
]

const T0 = 1_000_000

function job(kind: string): NewJob {
  return { id: randomUUID(), kind, payload: '{}', scope: null, priority: 0, runAt: null, maxAttempts: 3, timeoutMs: null, requeueInterrupted: false }
}

/** The two ways the runner makes a batch of final writes. */
const methods = {
  jobFinishMany: (driver: Driver, finishes: readonly JobFinish[]) => driver.jobFinishMany({ finishes, now: T0 + 10 }),
  jobFinishManyAndClaim: async (driver: Driver, finishes: readonly JobFinish[]) =>
    // Claims a kind with nothing queued: the claim part takes nothing, whatever the finishes free.
    (await driver.jobFinishManyAndClaim!({ finishes, now: T0 + 10, claim: { limit: 2, runnerId: 'r1', kinds: ['idle'] } })).applied,
} as const

describe.each(backends)('$name: a batch of final writes with send-backs is atomic', (backend) => {
  if (backend.skip !== undefined) {
    it.skip(`skipped: ${backend.skip}`, () => {})
    return
  }
  let opened: Opened | undefined
  afterEach(async () => {
    await opened?.drop()
    opened = undefined
  })

  for (const method of Object.keys(methods) as (keyof typeof methods)[]) {
    it(`${method}: whichever statement fails transiently, the batch's retry applies every write once`, async () => {
      opened = await backend.open()
      const { driver } = opened
      // One round per statement the call may send; a round past the statements it sends raises nothing.
      let faulted = 0
      for (let nth = 1; nth <= 4; nth++) {
        const jobs = [job('work'), job('work'), job('work')]
        await driver.jobInsertMany({ jobs, now: T0 })
        const claimed = await driver.jobClaim({ limit: 3, runnerId: 'r1', kinds: ['work'], now: T0 + 1 })
        expect(claimed.map((c) => c.id).sort()).toEqual(jobs.map((j) => j.id).sort())
        const [retried, snoozed, succeeded] = jobs as [NewJob, NewJob, NewJob]
        const finishes: JobFinish[] = [
          { id: retried.id, attempt: 1, status: 'retry', result: null, error: null, runAt: T0 + 1_000 },
          { id: snoozed.id, attempt: 1, status: 'snoozed', result: null, error: null, runAt: T0 + 1_000 },
          { id: succeeded.id, attempt: 1, status: 'succeeded', result: '{"ok":true}', error: null, runAt: null },
        ]

        let raised = false
        const first = await withFault({ mode: 'fail', error: backend.error, nth }, () => (raised = true), () => methods[method](driver, finishes)).then(
          (applied) => ({ applied }),
          (err: unknown) => ({ err }),
        )
        if (!raised) {
          // The call sent fewer statements than nth: it ran untouched.
          expect(first).toEqual({ applied: [true, true, true] })
          continue
        }
        faulted++
        expect('err' in first && first.err instanceof DatabaseError && first.err.transient, `round ${nth}`).toBe(true)
        // Nothing of the failed attempt is visible: every job is still running under its claim.
        for (const j of jobs) expect((await driver.jobGet({ id: j.id }))?.status, `round ${nth}`).toBe('running')

        // What the completer does with a transient failure: the same batch again.
        expect(await methods[method](driver, finishes), `round ${nth}`).toEqual([true, true, true])
        expect(await driver.jobGet({ id: retried.id })).toMatchObject({ status: 'scheduled', attempt: 1, maxAttempts: 3 })
        expect(await driver.jobGet({ id: snoozed.id })).toMatchObject({ status: 'scheduled', attempt: 1, maxAttempts: 4 })
        const ended = await driver.jobGet({ id: succeeded.id })
        expect(ended?.status).toBe('succeeded')
        expect(JSON.parse(ended!.result!)).toEqual({ ok: true })
      }
      // The call sends at least one statement the fault can fail: a round that raised nothing proves nothing.
      expect(faulted).toBeGreaterThan(0)
    })
  }
})
