import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import pg from 'pg'
import { afterEach, describe, expect, it } from 'vitest'
import { DatabaseError, type Driver, type JobFinish, type NewJob } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'
import { PG_URL, postgresSkipReason, testSchema } from '../support/backends.js'

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
 * raises them: the nth statement the driver sends within one call (BEGIN,
 * COMMIT and ROLLBACK aside) fails before it runs.
 */

/** Which statement of the next call fails: 0 for none. Counted over the statements sent since it was armed. */
const fault = { failAt: 0, seen: 0, raised: false }

function arm(nth: number): void {
  fault.failAt = nth
  fault.seen = 0
  fault.raised = false
}

function disarm(): void {
  fault.failAt = 0
}

/** Whether this statement is the one to fail; transaction control statements pass and are not counted. */
function shouldFail(text: string): boolean {
  if (fault.failAt === 0 || fault.raised || /^\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b/i.test(text)) return false
  fault.seen++
  if (fault.seen !== fault.failAt) return false
  fault.raised = true
  return true
}

let sqliteHooked = false

/** Wraps better-sqlite3's Statement methods once, so the armed statement throws SQLITE_BUSY as the library would. */
function hookSqlite(): void {
  if (sqliteHooked) return
  sqliteHooked = true
  const probe = new Database(':memory:')
  const proto = Object.getPrototypeOf(probe.prepare('SELECT 1')) as Record<string, (...args: unknown[]) => unknown>
  probe.close()
  for (const method of ['run', 'get', 'all', 'iterate']) {
    const real = proto[method]!
    proto[method] = function (this: { source: string }, ...args: unknown[]) {
      if (shouldFail(this.source)) throw new Database.SqliteError('injected SQLITE_BUSY', 'SQLITE_BUSY')
      return real.apply(this, args)
    }
  }
}

/** A pg Pool whose clients fail the armed statement with a serialization failure (40001), after a turn of the event loop, as a server answers. */
function faultyPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: PG_URL, max: 4 })
  pool.on('error', () => undefined)
  const hooked = new WeakSet<pg.PoolClient>()
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>
  pool.connect = (async () => {
    const client = await connect()
    if (!hooked.has(client)) {
      hooked.add(client)
      const query = client.query.bind(client) as (config: string | { text: string }, values?: unknown[]) => Promise<unknown>
      client.query = ((config: string | { text: string }, values?: unknown[]) => {
        if (shouldFail(typeof config === 'string' ? config : config.text)) {
          const err = new pg.DatabaseError('injected 40001', 0, 'error')
          err.code = '40001'
          return new Promise((_, reject) => setImmediate(() => reject(err)))
        }
        return query(config, values)
      }) as never
    }
    return client
  }) as never
  return pool
}

interface Opened {
  readonly driver: Driver
  drop(): Promise<void>
}

const backends: { name: string; skip?: string; open(): Promise<Opened> }[] = [
  {
    name: 'sqlite',
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
    async open() {
      const schema = testSchema()
      const pool = faultyPool()
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
    disarm()
    await opened?.drop()
    opened = undefined
  })

  for (const method of Object.keys(methods) as (keyof typeof methods)[]) {
    it(`${method}: whichever statement fails transiently, the batch's retry applies every write once`, async () => {
      opened = await backend.open()
      const { driver } = opened
      // One round per statement the call may send; a round past the statements it sends raises nothing.
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

        arm(nth)
        const first = await methods[method](driver, finishes).then(
          (applied) => ({ applied }),
          (err: unknown) => ({ err }),
        )
        const raised = fault.raised
        disarm()
        if (!raised) {
          // The call sent fewer statements than nth: it ran untouched.
          expect(first).toEqual({ applied: [true, true, true] })
          continue
        }
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
    })
  }
})
