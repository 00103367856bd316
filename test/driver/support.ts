import { randomUUID } from 'node:crypto'
import { setTimeout as delay } from 'node:timers/promises'
import { afterEach, beforeEach, expect } from 'vitest'
import type { ClaimParams, ClaimedJob, Driver, InsertResult, JobFinish, JobRow, JobStatus, KindRule, NewJob, WakeReason } from 'jobtable'
import { newJobId } from '../../src/id.js'
import type { Backend, Store } from '../support/backends.js'
import { cancelJob } from '../../src/runner/job-commands.js'

/**
 * The driver contract suite's shared pieces: a store and driver per test,
 * job builders, and the few acts that depend on how a database proves a
 * runner gone. Every test in test/driver calls Driver methods directly,
 * with no runner, so the suite is the written spec a new driver passes.
 */

/**
 * The suite's fake epoch: every `now` a test passes is T0 plus a small
 * offset. It lies in the past on purpose: PostgreSQL compares due times
 * with the earlier of the caller's `now` and its own clock (a runner ahead
 * of the database never makes a job due early), so a clock held in the
 * past is followed exactly, as River's tests hold theirs.
 */
export const T0 = Date.UTC(2020, 0, 1)

/** A far future time, for "finished before any time". */
export const FOREVER = Number.MAX_SAFE_INTEGER

/** How many ids the suite has made, so ids sort in the order tests make jobs, as real ids (UUIDv7, made at enqueue) do. */
let made = 0

/**
 * A job to insert: queued at once (no runAt), unscoped, priority 0, one
 * attempt, no timeout, no unique key; `kind` 'a' unless given. Its id is
 * a version 7 UUID made after every earlier one, as the runner makes them.
 */
export function newJob(fields: Partial<NewJob> = {}): NewJob {
  return {
    id: newJobId(T0 + ++made),
    kind: 'a',
    payload: '{"n":1}',
    scope: null,
    priority: 0,
    runAt: null,
    maxAttempts: 1,
    timeoutMs: null,
    requeueInterrupted: false,
    uniqueKey: null,
    traceContext: null,
    ...fields,
  }
}

/** `n` jobs made by newJob with the same fields. */
export function newJobs(n: number, fields: Partial<NewJob> = {}): NewJob[] {
  return Array.from({ length: n }, () => newJob(fields))
}

/** A runner id: a UUID, as the runner makes them (the SQLite driver names a lock file after it). */
export function newRunnerId(): string {
  return randomUUID()
}

/** One test's store and its first driver, made before and dropped after each test. */
export interface Contract {
  readonly store: Store
  /** The driver the test calls; further ones (other processes) come from `open`. */
  readonly driver: Driver
  /** Opens another driver on the same store, as another process would; dropped with the store. */
  open(options?: Parameters<Store['driver']>[0]): Driver
}

/** A fresh isolated store and driver for each test of the enclosing describe. */
export function contract(backend: Backend): Contract {
  let store: Store | undefined
  let driver: Driver | undefined
  beforeEach(async () => {
    store = await backend.store()
    driver = store.driver()
  })
  afterEach(async () => {
    await store?.drop()
    store = undefined
    driver = undefined
  })
  return {
    get store() {
      if (store === undefined) throw new Error('no store outside a test')
      return store
    },
    get driver() {
      if (driver === undefined) throw new Error('no driver outside a test')
      return driver
    },
    open(options) {
      if (store === undefined) throw new Error('no store outside a test')
      return store.driver(options)
    },
  }
}

/** Inserts `jobs` with jobInsertMany at `now` (T0 unless given). */
export async function insert(driver: Driver, jobs: readonly NewJob[], now = T0): Promise<InsertResult> {
  return driver.jobInsertMany({ jobs, now })
}

/** Claims for `runnerId` up to `limit` (default 10) jobs of `kinds` (default ['a']) at `now` (T0 + 10 unless given). */
export function claim(driver: Driver, params: Partial<ClaimParams> & { runnerId: string; now?: number }): Promise<ClaimedJob[]> {
  return driver.jobClaim({ limit: 10, kinds: ['a'], ...params, now: params.now ?? T0 + 10 })
}

/**
 * Inserts `job` (at T0) and claims it for `runnerId` (at T0 + 10): the
 * running job, with its claim. Fails unless that claim took exactly it,
 * so a test's setup cannot quietly claim another job.
 */
export async function running(driver: Driver, job: NewJob, runnerId: string, now = T0 + 10): Promise<ClaimedJob> {
  await insert(driver, [job])
  return claimExactly(driver, job, runnerId, now)
}

/** Claims the queued `job` for `runnerId` and fails unless the claim took exactly it. */
export async function claimExactly(driver: Driver, job: Pick<NewJob, 'id' | 'kind'>, runnerId: string, now = T0 + 10): Promise<ClaimedJob> {
  const claimed = await driver.jobClaim({ limit: 1, runnerId, kinds: [job.kind], now })
  expect(claimed.map((c) => c.id), 'the setup claim takes the job it was meant to').toEqual([job.id])
  return claimed[0]!
}

/** The final write of a success. */
export function succeed(job: Pick<ClaimedJob, 'id' | 'attempt'>, result: string | null = null): JobFinish {
  return { id: job.id, attempt: job.attempt, status: 'succeeded', result, error: null, runAt: null }
}

/** The final write of a failure with `error`. */
export function fail(job: Pick<ClaimedJob, 'id' | 'attempt'>, error: string, result: string | null = null): JobFinish {
  return { id: job.id, attempt: job.attempt, status: 'failed', result, error, runAt: null }
}

/** The final write of a job its handler gave up on after a cancellation. */
export function cancelled(job: Pick<ClaimedJob, 'id' | 'attempt'>, result: string | null = null): JobFinish {
  return { id: job.id, attempt: job.attempt, status: 'cancelled', result, error: null, runAt: null }
}

/** The write that sends a job back for another attempt, due at `runAt`. */
export function retry(job: Pick<ClaimedJob, 'id' | 'attempt'>, runAt: number, result: string | null = null): JobFinish {
  return { id: job.id, attempt: job.attempt, status: 'retry', result, error: null, runAt }
}

/** A snooze: sent back due at `runAt`, giving back the attempt this claim used. */
export function snooze(job: Pick<ClaimedJob, 'id' | 'attempt'>, runAt: number): JobFinish {
  return { id: job.id, attempt: job.attempt, status: 'snoozed', result: null, error: null, runAt }
}

/** A snooze that a handler's `job.rateLimited` ended: sent back due at `runAt`, with the cooldown of `key` until `until` to record. */
export function rateLimited(job: Pick<ClaimedJob, 'id' | 'attempt'>, runAt: number, key: string, until: number): JobFinish {
  return { id: job.id, attempt: job.attempt, status: 'snoozed', result: null, error: null, runAt, cooldown: { key, until } }
}

/** A claim's rules for one or more kinds (ClaimParams.limits): no caps unless given. */
export function rules(entries: Record<string, Partial<KindRule>>): Map<string, KindRule> {
  return new Map(Object.entries(entries).map(([kind, rule]) => [kind, { concurrency: null, scopeConcurrency: null, ...rule }]))
}

/** The job as jobGet reads it in any scope; fails when it is missing. */
export async function get(driver: Driver, id: string): Promise<JobRow> {
  const row = await driver.jobGet({ id })
  if (row === undefined) throw new Error(`job ${id} is missing`)
  return row
}

/** The job's status, or undefined when it is missing. */
export async function statusOf(driver: Driver, id: string): Promise<JobStatus | undefined> {
  return (await driver.jobGet({ id }))?.status
}

/** A stored result (JSON text) as its value: databases may respell JSON (PostgreSQL's jsonb adds spaces). */
export function parsed(result: string | null): unknown {
  return result === null ? null : JSON.parse(result)
}

/** Sorted copy, for results the contract returns in no particular order. */
export function sorted<T>(values: readonly T[]): T[] {
  return [...values].sort()
}

/**
 * Inserts `jobs` with jobInsertTx inside a transaction of the user's own,
 * committed or rolled back, and returns what jobInsertTx returned. A
 * driver whose capabilities say `txSync` writes synchronously (a
 * better-sqlite3 transaction must not await); another returns a promise.
 */
export async function insertTx(t: Contract, jobs: readonly NewJob[], outcome: 'commit' | 'rollback', now = T0): Promise<{ result: InsertResult; wasPromise: boolean }> {
  let result: InsertResult = undefined
  let wasPromise = false
  await t.store.transaction((tx) => {
    const returned: unknown = t.driver.jobInsertTx({ tx, jobs, now })
    if (returned instanceof Promise) {
      wasPromise = true
      return returned.then((value: InsertResult) => {
        result = value
      })
    }
    result = returned as InsertResult
    return undefined
  }, outcome)
  return { result, wasPromise }
}

/** A runner of another process that the test will make gone, the way its database notices a dead process. */
export interface DoomedRunner {
  readonly runnerId: string
  /** The driver it registered through (its process): claim its jobs through this. */
  readonly driver: Driver
  /** Takes its liveness away; resolves once `observer`'s driver can tell it is gone. */
  lose(): Promise<void>
}

/**
 * Registers a runner of `kinds` through a driver of its own (another
 * process), whose liveness `lose()` takes away as its database would
 * notice that process die, following `capabilities.liveness`:
 *
 * - no heartbeat (`heartbeatMs` null): an operating-system lock proves the
 *   runner alive, and closing its driver drops the lock as a dying
 *   process does: gone at once.
 * - a heartbeat: a lease on the database's own clock, which no `now`
 *   parameter moves. The runner registers through a driver with a lease
 *   of a few milliseconds, and `lose()` waits, on a signal rather than a
 *   sleep of a guessed length, until `observer` reports the runner's
 *   private probe kind unserved: the lease has lapsed. The probe job is
 *   then cancelled and pruned, leaving nothing behind.
 */
export async function doomedRunner(t: Contract, observer: Driver, kinds: readonly string[], now = T0): Promise<DoomedRunner> {
  const runnerId = newRunnerId()
  if (t.driver.capabilities.liveness.heartbeatMs === null) {
    const driver = t.open()
    await driver.runnerRegister({ runnerId, kinds, now })
    return { runnerId, driver, lose: () => driver.close() }
  }
  // The PostgreSQL store hands its options through to postgres(); `leaseMs` is that driver's name for the lease.
  const driver = t.open({ leaseMs: SHORT_LEASE_MS } as Parameters<Store['driver']>[0])
  const probe = `lease-probe-${randomUUID()}`
  await driver.runnerRegister({ runnerId, kinds: [...kinds, probe], now })
  return {
    runnerId,
    driver,
    async lose() {
      const job = newJob({ kind: probe })
      await insert(observer, [job], now)
      for (let tries = 0; !(await observer.queueUnservedKinds({ now })).includes(probe); tries++) {
        if (tries > 2_500) throw new Error(`the ${SHORT_LEASE_MS} ms lease of runner ${runnerId} never lapsed`)
        await delay(2)
      }
      expect(await cancelJob(observer, { id: job.id, now })).toBe('cancelled')
      expect(await observer.jobPrune({ kind: probe, statuses: ['cancelled'], finishedBefore: FOREVER, limit: 10 })).toBe(1)
      await driver.close()
    },
  }
}

/** The lease of a doomed runner on a lease-based driver: a few ms of the database's clock. */
const SHORT_LEASE_MS = 3

/** Records the wakes a driver's onWake delivers, so a test waits on them rather than on a clock. */
export interface WakeLog {
  /** Every wake so far, in order. */
  readonly seen: readonly WakeReason[]
  /** Resolves once a wake of `reason` arrives after the first `after` wakes. */
  after(after: number, reason: WakeReason): Promise<void>
  /** The function onWake returned. */
  readonly stop: () => void
}

/** Subscribes to `driver`'s onWake (which the caller has checked is present). */
export function wakeLog(driver: Driver): WakeLog {
  const seen: WakeReason[] = []
  let waiters: (() => void)[] = []
  const stop = driver.onWake!((what) => {
    seen.push(what)
    const current = waiters
    waiters = []
    for (const w of current) w()
  })
  return {
    seen,
    stop,
    async after(after, reason) {
      while (!seen.slice(after).includes(reason)) await new Promise<void>((resolve) => waiters.push(resolve))
    },
  }
}
