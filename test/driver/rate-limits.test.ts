import { describe, expect, it } from 'vitest'
import type { ClaimedJob, Driver, KindRule, NewJob } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import {
  T0,
  claim,
  contract,
  get,
  insert,
  insertTx,
  newJob,
  newJobs,
  newRunnerId,
  rateLimited,
  rules,
  running,
  snooze,
  statusOf,
  succeed,
} from './support.js'
import { cancelJob } from '../../src/runner/job-commands.js'

const ids = (jobs: readonly Pick<ClaimedJob | NewJob, 'id'>[]) => jobs.map((j) => j.id)

/** A rate rule of `limit` claims per `periodMs` (1 s unless given) in `bucket` (null: one bucket per scope). */
function rate(limit: number, bucket: string | null, periodMs = 1_000): Pick<KindRule, 'rate'> {
  return { rate: { limit, periodMs, bucket } }
}

/** Claims up to `limit` jobs of `kinds` under `limits` at `now`, for a new runner. */
function take(driver: Driver, kinds: string[], limits: ReadonlyMap<string, KindRule>, now: number, limit = 10): Promise<ClaimedJob[]> {
  return claim(driver, { runnerId: newRunnerId(), kinds, limits, now, limit })
}

/**
 * The kinds' rules in a claim (ClaimParams.limits, KindRule): rate limits
 * counted in the claim's transaction over every process (a sliding
 * window of claims, a claim given back included), cooldowns of a bucket
 * or a kind, and fair order across scopes (NewJob.fair positions), with
 * the admin reads of them (rateUsage, cooldownList, cooldownClear) and
 * of the jobs finished per minute (jobActivity). Time is the `now` each
 * call is given: no test waits on a clock.
 */
describeEachBackend('Driver rules: rate limits, cooldowns, fair order', (backend) => {
  const t = contract(backend)

  describe('rate limits', () => {
    it("never gives a kind's own bucket more than `limit` claims in a window, in any process; the rest stay queued with their attempt unused", async () => {
      const jobs = newJobs(8)
      await insert(t.driver, jobs)
      const limits = rules({ a: rate(3, 'a') })
      const first = await take(t.driver, ['a'], limits, T0 + 10)
      expect(ids(first)).toEqual(ids(jobs.slice(0, 3)))
      expect(await take(t.driver, ['a'], limits, T0 + 500)).toEqual([])
      // Another process reads the same window.
      expect(await take(t.open(), ['a'], limits, T0 + 600)).toEqual([])
      for (const job of jobs.slice(3)) expect(await get(t.driver, job.id)).toMatchObject({ status: 'queued', attempt: 0 })
      expect(await t.driver.rateUsage({ now: T0 + 600, windows: [{ bucket: 'a', periodMs: 1_000, perScope: false }] })).toEqual([{ bucket: 'a', used: 3, oldest: T0 + 10 }])
    })

    it('gives room back as the oldest claims leave the window, at their time plus the period', async () => {
      const jobs = newJobs(6)
      await insert(t.driver, jobs)
      const limits = rules({ a: rate(2, 'a') })
      const other = t.open()
      expect(ids(await take(t.driver, ['a'], limits, T0 + 10, 1))).toEqual([jobs[0]!.id])
      expect(ids(await take(t.driver, ['a'], limits, T0 + 20, 5))).toEqual([jobs[1]!.id])
      expect(await take(t.driver, ['a'], limits, T0 + 1_009)).toEqual([])
      expect(await take(other, ['a'], limits, T0 + 1_009)).toEqual([])
      // The claim at T0 + 10 has left; the one at T0 + 20 has not.
      expect(ids(await take(t.driver, ['a'], limits, T0 + 1_011))).toEqual([jobs[2]!.id])
      expect(await take(other, ['a'], limits, T0 + 1_015)).toEqual([])
      expect(ids(await take(other, ['a'], limits, T0 + 1_021))).toEqual([jobs[3]!.id])
      expect(await take(t.driver, ['a'], limits, T0 + 1_025)).toEqual([])
      expect(ids(await take(t.driver, ['a'], limits, T0 + 2_100))).toEqual(ids(jobs.slice(4, 6)))
    })

    it('counts one shared bucket over every kind naming it', async () => {
      const a = newJobs(3, { kind: 'a' })
      const b = newJobs(3, { kind: 'b' })
      await insert(t.driver, [a[0]!, b[0]!, a[1]!, b[1]!, a[2]!, b[2]!])
      const limits = rules({ a: rate(3, 'provider'), b: rate(3, 'provider') })
      const claimed = await take(t.driver, ['a', 'b'], limits, T0 + 10)
      expect(ids(claimed)).toEqual([a[0]!.id, b[0]!.id, a[1]!.id])
      // A runner of b alone, in another process, finds the bucket spent by a's claims too.
      expect(await take(t.open(), ['b'], rules({ b: rate(3, 'provider') }), T0 + 20)).toEqual([])
      expect(await t.driver.rateUsage({ now: T0 + 20, windows: [{ bucket: 'provider', periodMs: 1_000, perScope: false }] })).toEqual([
        { bucket: 'provider', used: 3, oldest: T0 + 10 },
      ])
    })

    it('gives each scope its own window with a per-scope rule, and takes the other scopes past a spent one', async () => {
      const one = newJobs(4, { scope: 'tenant-1' })
      const two = newJobs(3, { scope: 'tenant-2' })
      const none = newJob({ scope: null })
      await insert(t.driver, [...one, ...two, none])
      const limits = rules({ a: rate(2, null) })
      const claimed = await take(t.driver, ['a'], limits, T0 + 10, 3)
      expect(ids(claimed)).toEqual([one[0]!.id, one[1]!.id, two[0]!.id])
      expect(ids(await take(t.open(), ['a'], limits, T0 + 20))).toEqual([two[1]!.id, none.id])
      expect(await take(t.driver, ['a'], limits, T0 + 30)).toEqual([])
      for (const job of [one[2]!, one[3]!, two[2]!]) expect(await get(t.driver, job.id)).toMatchObject({ status: 'queued', attempt: 0 })
      const usage = await t.driver.rateUsage({ now: T0 + 30, windows: [{ bucket: 'a', periodMs: 1_000, perScope: true }] })
      expect([...usage].sort((x, y) => x.bucket.localeCompare(y.bucket))).toEqual([
        { bucket: 'a@', used: 1, oldest: T0 + 20 },
        { bucket: 'a@tenant-1', used: 2, oldest: T0 + 10 },
        { bucket: 'a@tenant-2', used: 2, oldest: T0 + 10 },
      ])
    })

    it('passes over a spent kind to take other kinds, in the same claim and under one limit', async () => {
      const limited = newJobs(3, { kind: 'a', priority: 9 })
      const free = newJobs(3, { kind: 'b' })
      await insert(t.driver, [...limited, ...free])
      const claimed = await take(t.driver, ['a', 'b'], rules({ a: rate(1, 'a') }), T0 + 10, 3)
      expect(ids(claimed)).toEqual([limited[0]!.id, free[0]!.id, free[1]!.id])
      expect(claimed.map((j) => j.attempt)).toEqual([1, 1, 1])
      expect(await get(t.driver, limited[1]!.id)).toMatchObject({ status: 'queued', attempt: 0 })
      // Known full now: the next claim takes the unrated kind alone.
      expect(ids(await take(t.driver, ['a', 'b'], rules({ a: rate(1, 'a') }), T0 + 20, 3))).toEqual([free[2]!.id])
    })

    it('applies `concurrency` to a rated kind as well', async () => {
      await insert(t.driver, newJobs(5))
      expect(await take(t.driver, ['a'], rules({ a: { concurrency: 2, ...rate(4, 'a') } }), T0 + 10)).toHaveLength(2)
      expect(await take(t.driver, ['a'], rules({ a: { concurrency: 2, ...rate(4, 'a') } }), T0 + 20)).toEqual([])
    })

    it('counts a claim given back unstarted (jobRelease): the window is of claims, not of running jobs', async () => {
      const jobs = newJobs(2)
      await insert(t.driver, jobs)
      const limits = rules({ a: rate(1, 'a') })
      const [claimed] = await take(t.driver, ['a'], limits, T0 + 10)
      await t.driver.jobRelease({ jobs: [{ id: claimed!.id, attempt: claimed!.attempt }], now: T0 + 20 })
      expect(await get(t.driver, claimed!.id)).toMatchObject({ status: 'queued', attempt: 0 })
      expect(await take(t.open(), ['a'], limits, T0 + 30)).toEqual([])
      expect(await t.driver.rateUsage({ now: T0 + 30, windows: [{ bucket: 'a', periodMs: 1_000, perScope: false }] })).toEqual([{ bucket: 'a', used: 1, oldest: T0 + 10 }])
    })

    it('limits the claims of jobFinishManyAndClaim as those of jobClaim', async () => {
      if (t.driver.jobFinishManyAndClaim === undefined) return
      const jobs = newJobs(4)
      await insert(t.driver, jobs)
      const limits = rules({ a: rate(2, 'a') })
      const runner = newRunnerId()
      const [first] = await claim(t.driver, { runnerId: runner, limits, limit: 1, now: T0 + 10 })
      const { applied, claimed } = await t.driver.jobFinishManyAndClaim({
        finishes: [succeed(first!)],
        now: T0 + 20,
        claim: { limit: 3, runnerId: runner, kinds: ['a'], limits },
      })
      expect(applied).toEqual([true])
      expect(ids(claimed)).toEqual([jobs[1]!.id])
    })

    it('never exceeds the limit across concurrent claims from two processes', async () => {
      await insert(t.driver, newJobs(20))
      const other = t.open()
      const limits = rules({ a: rate(5, 'a', 60_000) })
      const claims = await Promise.all(Array.from({ length: 8 }, (_, i) => take(i % 2 === 0 ? t.driver : other, ['a'], limits, T0 + 10 + i, 3)))
      expect(claims.flat()).toHaveLength(5)
    })

    it("reports each claimed job's scope, rated or not", async () => {
      const rated = newJob({ kind: 'a', scope: 'tenant-1' })
      const plain = newJob({ kind: 'b', scope: null })
      const alone = newJob({ kind: 'c', scope: 'tenant-2' })
      await insert(t.driver, [rated, plain, alone])
      const claimed = await take(t.driver, ['a', 'b'], rules({ a: rate(5, 'a') }), T0 + 10)
      expect(claimed.map((j) => [j.id, j.scope])).toEqual([
        [rated.id, 'tenant-1'],
        [plain.id, null],
      ])
      expect((await take(t.driver, ['c'], new Map(), T0 + 10)).map((j) => j.scope)).toEqual(['tenant-2'])
    })
  })

  describe('cooldowns', () => {
    /** Records a cooldown of `key` until `until` the way a handler does: a snooze of a job of kind `via` that carries it. */
    async function coolDown(key: string, until: number, via = 'cooler', now = T0 + 20): Promise<void> {
      const job = await running(t.driver, newJob({ kind: via }), newRunnerId())
      expect(await t.driver.jobFinishMany({ finishes: [rateLimited(job, until, key, until)], now })).toEqual([true])
    }

    it('holds a kind without a rate rule (its key: the kind) until `until`, and not after; other kinds are claimed past it', async () => {
      const held = newJobs(2, { kind: 'a', priority: 9 })
      const other = newJob({ kind: 'b' })
      await insert(t.driver, [...held, other])
      await coolDown('a', T0 + 1_000)
      expect(ids(await take(t.driver, ['a', 'b'], new Map(), T0 + 30))).toEqual([other.id])
      expect(await take(t.open(), ['a'], new Map(), T0 + 999)).toEqual([])
      expect(await t.driver.cooldownList({ now: T0 + 999 })).toEqual([{ key: 'a', until: T0 + 1_000 }])
      expect(await t.driver.cooldownList({ now: T0 + 1_000 })).toEqual([])
      expect(ids(await take(t.open(), ['a'], new Map(), T0 + 1_000))).toEqual(ids(held))
    })

    it("holds a rated kind by its bucket's key: a shared bucket, or one scope's bucket alone", async () => {
      const shared = newJob({ kind: 'a' })
      const one = newJob({ kind: 's', scope: 'tenant-1' })
      const two = newJob({ kind: 's', scope: 'tenant-2' })
      await insert(t.driver, [shared, one, two])
      const limits = rules({ a: rate(100, 'provider'), s: rate(100, null) })
      await coolDown('provider', T0 + 1_000)
      await coolDown('s@tenant-1', T0 + 1_000)
      // The kind's own name is not its key once it has a rate rule.
      await coolDown('s', T0 + 1_000)
      expect(ids(await take(t.driver, ['a', 's'], limits, T0 + 500))).toEqual([two.id])
      expect(ids(await take(t.driver, ['a', 's'], limits, T0 + 1_000))).toEqual([shared.id, one.id])
    })

    it('is recorded by a final write only when it applied, whatever status it ended with', async () => {
      const runner = newRunnerId()
      const job = await running(t.driver, newJob(), runner)
      // A stale claim: the write does not apply, and records nothing.
      expect(await t.driver.jobFinishMany({ finishes: [rateLimited({ id: job.id, attempt: job.attempt + 1 }, T0 + 500, 'a', T0 + 500)], now: T0 + 20 })).toEqual([false])
      expect(await t.driver.cooldownList({ now: T0 + 20 })).toEqual([])
      // A cancel request wins over the snooze, and the cooldown is kept.
      expect(await cancelJob(t.driver, { id: job.id, now: T0 + 30 })).toBe('requested')
      expect(await t.driver.jobFinishMany({ finishes: [rateLimited(job, T0 + 500, 'a', T0 + 500)], now: T0 + 40 })).toEqual([true])
      expect(await statusOf(t.driver, job.id)).toBe('cancelled')
      expect(await t.driver.cooldownList({ now: T0 + 40 })).toEqual([{ key: 'a', until: T0 + 500 }])
    })

    it('gives the attempt back and queues the job again at `runAt`, as a snooze', async () => {
      const job = await running(t.driver, newJob(), newRunnerId())
      expect(await t.driver.jobFinishMany({ finishes: [rateLimited(job, T0 + 10, 'a', T0 + 1_000)], now: T0 + 20 })).toEqual([true])
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'queued', attempt: 1, maxAttempts: 2 })
    })

    it('is extended by a later one and never shortened by an earlier one', async () => {
      await coolDown('p', T0 + 1_000)
      await coolDown('p', T0 + 500)
      expect(await t.driver.cooldownList({ now: T0 + 100 })).toEqual([{ key: 'p', until: T0 + 1_000 }])
      await coolDown('p', T0 + 2_000)
      expect(await t.driver.cooldownList({ now: T0 + 100 })).toEqual([{ key: 'p', until: T0 + 2_000 }])
    })

    it('is ended by cooldownClear (true when one was recorded, in force or not), and the jobs it held are claimed', async () => {
      const job = newJob()
      await insert(t.driver, [job])
      await coolDown('a', T0 + 1_000)
      await coolDown('old', T0 + 25)
      expect(await t.driver.cooldownClear({ key: 'a' })).toBe(true)
      expect(await t.driver.cooldownClear({ key: 'a' })).toBe(false)
      expect(await t.driver.cooldownClear({ key: 'old' })).toBe(true)
      expect(await t.driver.cooldownClear({ key: 'never' })).toBe(false)
      expect(await t.driver.cooldownList({ now: T0 })).toEqual([])
      expect(ids(await take(t.driver, ['a'], new Map(), T0 + 30))).toEqual([job.id])
    })

    it('is written in the same transaction as the claims of jobFinishManyAndClaim, before them', async () => {
      if (t.driver.jobFinishManyAndClaim === undefined) return
      const runner = newRunnerId()
      const job = await running(t.driver, newJob(), runner)
      const next = newJob()
      await insert(t.driver, [next])
      const { applied, claimed } = await t.driver.jobFinishManyAndClaim({
        finishes: [rateLimited(job, T0 + 1_000, 'a', T0 + 1_000)],
        now: T0 + 20,
        claim: { limit: 5, runnerId: runner, kinds: ['a'] },
      })
      expect([applied, claimed]).toEqual([[true], []])
    })
  })

  describe('fair order', () => {
    const fair = rules({ f: { fair: true } })
    const fairJobs = (n: number, scope: string | null, fields: Partial<NewJob> = {}) => newJobs(n, { kind: 'f', scope, fair: true, ...fields })

    it("takes the scopes in turn: a scope's job enqueued behind another's backlog is in the next claim", async () => {
      const a = fairJobs(50, 'house-a')
      await insert(t.driver, a)
      expect(ids(await take(t.driver, ['f'], fair, T0 + 10, 2))).toEqual(ids(a.slice(0, 2)))
      const [b] = fairJobs(1, 'house-b')
      await insert(t.driver, [b!], T0 + 20)
      expect(ids(await take(t.driver, ['f'], fair, T0 + 30, 2))).toEqual([a[2]!.id, b!.id])
    })

    it('interleaves scopes enqueued in one batch, one job of each in turn, within each priority first', async () => {
      const [a, b, c] = [fairJobs(3, 'a'), fairJobs(3, 'b'), fairJobs(3, null)]
      const urgent = fairJobs(1, 'b', { priority: 5 })
      await insert(t.driver, [...a, ...b, ...c, ...urgent])
      const order: string[] = []
      for (let i = 0; i < 11; i++) order.push(...ids(await take(t.driver, ['f'], fair, T0 + 10 + i, 1)))
      expect(order).toEqual(ids([urgent[0]!, a[0]!, b[0]!, c[0]!, a[1]!, b[1]!, c[1]!, a[2]!, b[2]!, c[2]!]))
    })

    it("counts a newcomer's turn within its priority: another scope's job of a higher priority does not move it behind that scope's backlog", async () => {
      const backlog = fairJobs(10, 'a')
      const [urgent] = fairJobs(1, 'a', { priority: 5 })
      const [small] = fairJobs(1, 'b')
      await insert(t.driver, backlog)
      await insert(t.driver, [urgent!], T0 + 1)
      await insert(t.driver, [small!], T0 + 2)
      // urgent, then a0 and b0 in turn (returned oldest first).
      expect(ids(await take(t.driver, ['f'], fair, T0 + 10, 3))).toEqual(ids([backlog[0]!, urgent!, small!]))
    })

    it('takes the jobs without a position (enqueued before the kind was fair) first', async () => {
      const before = newJobs(2, { kind: 'f', scope: 'a' })
      const after = [...fairJobs(2, 'a'), ...fairJobs(1, 'b')]
      await insert(t.driver, [...before, ...after])
      expect(ids(await take(t.driver, ['f'], fair, T0 + 10, 3))).toEqual([before[0]!.id, before[1]!.id, after[0]!.id])
    })

    it('keeps its order among the other kinds of a claim', async () => {
      const a = fairJobs(4, 'a')
      await insert(t.driver, a)
      const others = newJobs(4, { kind: 'o' })
      await insert(t.driver, others)
      expect(ids(await take(t.driver, ['f'], fair, T0 + 10, 1))).toEqual([a[0]!.id])
      const [b] = fairJobs(1, 'b')
      await insert(t.driver, [b!], T0 + 20)
      // b's turn comes right after a's next job, ahead of a's older ones and of the other kind.
      expect(ids(await take(t.driver, ['f', 'o'], fair, T0 + 30, 4))).toEqual(ids([a[1]!, a[2]!, others[0]!, b!]))
      expect(ids(await take(t.driver, ['f', 'o'], fair, T0 + 40, 1))).toEqual([a[3]!.id])
    })

    it('keeps `scopeConcurrency` with fair order', async () => {
      const [a, b] = [fairJobs(3, 'a'), fairJobs(3, 'b')]
      await insert(t.driver, [...a, ...b])
      const limits = rules({ f: { fair: true, scopeConcurrency: 1 } })
      expect(ids(await take(t.driver, ['f'], limits, T0 + 10))).toEqual([a[0]!.id, b[0]!.id])
      expect(await take(t.driver, ['f'], limits, T0 + 20)).toEqual([])
    })

    it('keeps a per-scope rate limit with fair order', async () => {
      const [a, b] = [fairJobs(3, 'a'), fairJobs(3, 'b')]
      await insert(t.driver, [...a, ...b])
      const limits = rules({ f: { fair: true, ...rate(2, null) } })
      // Fair order takes a0, b0, a1 (a claim returns its jobs oldest first).
      expect(ids(await take(t.driver, ['f'], limits, T0 + 10, 3))).toEqual(ids([a[0]!, a[1]!, b[0]!]))
      expect(ids(await take(t.driver, ['f'], limits, T0 + 20, 3))).toEqual([b[1]!.id])
    })

    it('gives no position to a job not stored because its unique key is held', async () => {
      const a = fairJobs(4, 'a')
      const [held] = fairJobs(1, 'b', { uniqueKey: 'k' })
      await insert(t.driver, [...a, held!])
      // Refused five times: had each taken a position, b's next job would wait behind a's whole backlog.
      for (let i = 0; i < 5; i++) expect(await insert(t.driver, fairJobs(1, 'b', { uniqueKey: 'k' }), T0 + 1)).toEqual([held!.id])
      const [next] = fairJobs(1, 'b')
      await insert(t.driver, [next!], T0 + 2)
      // a0, the held job, a1, then b's next (a claim returns its jobs oldest first); a2 is not among them.
      expect(ids(await take(t.driver, ['f'], fair, T0 + 10, 4))).toEqual(ids([a[0]!, a[1]!, held!, next!]))
    })

    it("gives positions in the user's own transaction (jobInsertTx), and none when it rolls back", async () => {
      const a = fairJobs(3, 'a')
      await insertTx(t, a, 'commit')
      await insertTx(t, fairJobs(3, 'b'), 'rollback')
      const b = fairJobs(2, 'b')
      await insertTx(t, b, 'commit')
      // a0, b0, a1, b1 (returned oldest first); a2 is not among them.
      expect(ids(await take(t.driver, ['f'], fair, T0 + 10, 4))).toEqual(ids([a[0]!, a[1]!, b[0]!, b[1]!]))
    })
  })

  describe('jobActivity', () => {
    it('counts the jobs finished at or after `since` by minute and status, within a scope when given', async () => {
      const minute = (m: number) => T0 + m * 60_000
      const runner = newRunnerId()
      const early = await running(t.driver, newJob({ kind: 'a' }), runner)
      await t.driver.jobFinishMany({ finishes: [succeed(early)], now: minute(1) - 1 })
      const jobs: ClaimedJob[] = []
      for (const [kind, scope] of [['a', 'x'], ['b', 'x'], ['a', null], ['c', 'y']] as const) jobs.push(await running(t.driver, newJob({ kind, scope }), runner))
      await t.driver.jobFinishMany({ finishes: [succeed(jobs[0]!), succeed(jobs[1]!)], now: minute(1) + 5 })
      await t.driver.jobFinishMany({ finishes: [{ ...succeed(jobs[2]!), status: 'failed', error: 'boom' }], now: minute(2) + 59_999 })
      await t.driver.jobFinishMany({ finishes: [snooze(jobs[3]!, minute(9))], now: minute(2) })
      const waiting = newJob({ kind: 'd', scope: 'x' })
      await insert(t.driver, [waiting])
      expect(await cancelJob(t.driver, { id: waiting.id, now: minute(3) })).toBe('cancelled')

      const sortedActivity = async (scope?: string | null) =>
        [...(await t.driver.jobActivity({ since: minute(1), ...(scope === undefined ? {} : { scope }) }))].sort((p, q) => p.minute - q.minute || p.status.localeCompare(q.status))
      expect(await sortedActivity()).toEqual([
        { minute: minute(1), status: 'succeeded', count: 2 },
        { minute: minute(2), status: 'failed', count: 1 },
        { minute: minute(3), status: 'cancelled', count: 1 },
      ])
      expect(await sortedActivity('x')).toEqual([
        { minute: minute(1), status: 'succeeded', count: 2 },
        { minute: minute(3), status: 'cancelled', count: 1 },
      ])
      expect(await sortedActivity(null)).toEqual([{ minute: minute(2), status: 'failed', count: 1 }])
      expect(await sortedActivity('y')).toEqual([])
    })
  })

  describe('rateUsage', () => {
    it('leaves out a bucket without claims in its window, and reads each window by its own period', async () => {
      await insert(t.driver, newJobs(2))
      await take(t.driver, ['a'], rules({ a: rate(5, 'a', 60_000) }), T0 + 10)
      const windows = (periodMs: number) => [
        { bucket: 'a', periodMs, perScope: false },
        { bucket: 'none', periodMs, perScope: false },
        { bucket: 'none', periodMs, perScope: true },
      ]
      expect(await t.driver.rateUsage({ now: T0 + 1_000, windows: windows(60_000) })).toEqual([{ bucket: 'a', used: 2, oldest: T0 + 10 }])
      expect(await t.driver.rateUsage({ now: T0 + 1_000, windows: windows(500) })).toEqual([])
    })
  })
})
