import { describe, expect, it } from 'vitest'
import type { JobCount, JobRow, QueueCount } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import {
  FOREVER,
  T0,
  claim,
  claimExactly,
  contract,
  fail,
  get,
  insert,
  newJob,
  newJobs,
  newRunnerId,
  parsed,
  retry,
  running,
  statusOf,
  succeed,
} from './support.js'
import { cancelJob, retryJobNow } from '../../src/runner/job-commands.js'

/** Counts in a stable order, for results the contract gives in no particular order. */
function byKindAndStatus<T extends { kind: string | null; status: string }>(counts: readonly T[]): T[] {
  return [...counts].sort((x, y) => `${x.kind}/${x.status}`.localeCompare(`${y.kind}/${y.status}`))
}

const ids = (rows: readonly JobRow[]) => rows.map((r) => r.id)

/**
 * DriverAdmin: what an application, the HTTP API, the CLI and the
 * dashboard read and change. Scope rules (jobGet's: undefined sees every
 * job, a string or null only that scope's) apply to cancel, retry now,
 * counts, get and list alike.
 */
describeEachBackend('DriverAdmin', (backend) => {
  const t = contract(backend)

  describe('jobCancel', () => {
    it("cancels a queued or scheduled job at once ('cancelled'), finished at `now`", async () => {
      const queued = newJob()
      const scheduled = newJob({ runAt: T0 + 60_000 })
      await insert(t.driver, [queued, scheduled])
      expect(await cancelJob(t.driver, { id: queued.id, now: T0 + 100 })).toBe('cancelled')
      expect(await cancelJob(t.driver, { id: scheduled.id, now: T0 + 100 })).toBe('cancelled')
      expect(await statusOf(t.driver, queued.id)).toBe('cancelled')
      expect(await statusOf(t.driver, scheduled.id)).toBe('cancelled')
      expect(await claim(t.driver, { runnerId: newRunnerId(), now: T0 + 60_000 })).toEqual([])
      expect(await t.driver.jobPromoteDue({ now: T0 + 60_000, limit: 10 })).toBe(0)
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['cancelled'], finishedBefore: T0 + 100, limit: 10 })).toBe(0)
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['cancelled'], finishedBefore: T0 + 101, limit: 10 })).toBe(2)
    })

    it("marks a running job for its runner to abort ('requested'), leaving it running, as often as asked", async () => {
      const runner = newRunnerId()
      const job = await running(t.driver, newJob(), runner)
      expect(await cancelJob(t.driver, { id: job.id, now: T0 + 100 })).toBe('requested')
      expect(await cancelJob(t.driver, { id: job.id, now: T0 + 200 })).toBe('requested')
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'running', attempt: 1 })
      expect(await t.driver.jobCancelRequested({ runnerId: runner })).toEqual([job.id])
    })

    it("leaves a finished job as it is ('terminal'), and answers 'missing' for an unknown id", async () => {
      const runner = newRunnerId()
      const ok = await running(t.driver, newJob(), runner)
      const bad = await running(t.driver, newJob({ kind: 'b' }), runner)
      await t.driver.jobFinishMany({ finishes: [succeed(ok, '"r"'), fail(bad, 'boom')], now: T0 + 50 })
      const gone = newJob({ kind: 'c' })
      await insert(t.driver, [gone])
      await cancelJob(t.driver, { id: gone.id, now: T0 + 60 })

      expect(await cancelJob(t.driver, { id: ok.id, now: T0 + 100 })).toBe('terminal')
      expect(await cancelJob(t.driver, { id: bad.id, now: T0 + 100 })).toBe('terminal')
      expect(await cancelJob(t.driver, { id: gone.id, now: T0 + 100 })).toBe('terminal')
      expect(await get(t.driver, ok.id)).toMatchObject({ status: 'succeeded', result: '"r"' })
      expect(await get(t.driver, bad.id)).toMatchObject({ status: 'failed', error: 'boom' })
      expect(await cancelJob(t.driver, { id: newJob().id, now: T0 + 100 })).toBe('missing')
    })

    it("answers 'missing' for a job of another scope and leaves it be; finds it in its own scope or with no scope given", async () => {
      const scoped = newJob({ scope: 'tenant-1' })
      const unscoped = newJob({ scope: null })
      await insert(t.driver, [scoped, unscoped])
      expect(await cancelJob(t.driver, { id: scoped.id, scope: 'tenant-2', now: T0 + 100 })).toBe('missing')
      expect(await cancelJob(t.driver, { id: scoped.id, scope: null, now: T0 + 100 })).toBe('missing')
      expect(await cancelJob(t.driver, { id: unscoped.id, scope: 'tenant-1', now: T0 + 100 })).toBe('missing')
      expect(await statusOf(t.driver, scoped.id)).toBe('queued')
      expect(await statusOf(t.driver, unscoped.id)).toBe('queued')

      expect(await cancelJob(t.driver, { id: scoped.id, scope: 'tenant-1', now: T0 + 100 })).toBe('cancelled')
      expect(await cancelJob(t.driver, { id: unscoped.id, scope: null, now: T0 + 100 })).toBe('cancelled')
      const other = newJob({ scope: 'tenant-9' })
      await insert(t.driver, [other])
      expect(await cancelJob(t.driver, { id: other.id, now: T0 + 100 })).toBe('cancelled')
    })

    it("answers 'missing' for a running job of another scope, and requests nothing", async () => {
      const runner = newRunnerId()
      const job = await running(t.driver, newJob({ scope: 'tenant-1' }), runner)
      expect(await cancelJob(t.driver, { id: job.id, scope: 'tenant-2', now: T0 + 100 })).toBe('missing')
      expect(await t.driver.jobCancelRequested({ runnerId: runner })).toEqual([])
      expect(await cancelJob(t.driver, { id: job.id, scope: 'tenant-1', now: T0 + 100 })).toBe('requested')
    })
  })

  describe('jobCancelRequested', () => {
    it('names the running jobs of `runnerId` whose cancellation was requested, and no others', async () => {
      const [mine, theirs] = [newRunnerId(), newRunnerId()]
      const asked = await running(t.driver, newJob({ kind: 'a' }), mine)
      await running(t.driver, newJob({ kind: 'b' }), mine)
      const finished = await running(t.driver, newJob({ kind: 'c' }), mine)
      const other = await running(t.driver, newJob({ kind: 'd' }), theirs)
      for (const job of [asked, finished, other]) expect(await cancelJob(t.driver, { id: job.id, now: T0 + 100 })).toBe('requested')
      await t.driver.jobFinishMany({ finishes: [succeed(finished)], now: T0 + 200 })

      expect(await t.driver.jobCancelRequested({ runnerId: mine })).toEqual([asked.id])
      expect(await t.driver.jobCancelRequested({ runnerId: theirs })).toEqual([other.id])
      expect(await t.driver.jobCancelRequested({ runnerId: newRunnerId() })).toEqual([])
    })
  })

  describe('jobRetryNow', () => {
    it("makes a scheduled job due now ('queued')", async () => {
      const waiting = newJob({ runAt: T0 + 60_000 })
      await insert(t.driver, [waiting])
      const backoff = await running(t.driver, newJob({ kind: 'b', maxAttempts: 3 }), newRunnerId())
      await t.driver.jobFinishMany({ finishes: [retry(backoff, T0 + 60_000)], now: T0 + 20 })

      expect(await retryJobNow(t.driver, { id: waiting.id, now: T0 + 500 })).toBe('queued')
      expect(await retryJobNow(t.driver, { id: backoff.id, now: T0 + 500 })).toBe('queued')
      expect(await get(t.driver, waiting.id)).toMatchObject({ status: 'queued', runAt: T0 + 500, attempt: 0, maxAttempts: 1 })
      expect(await get(t.driver, backoff.id)).toMatchObject({ status: 'queued', runAt: T0 + 500, attempt: 1, maxAttempts: 3 })
      expect(await t.driver.queueNextDue({ now: T0 + 500 })).toBeNull()
    })

    it("queues a failed job for one more attempt, keeping its attempt count and last result, clearing its error ('queued')", async () => {
      const job = await running(t.driver, newJob({ maxAttempts: 1 }), newRunnerId())
      await t.driver.jobPublish({ id: job.id, attempt: job.attempt, result: '"half"', now: T0 + 15 })
      await t.driver.jobFinishMany({ finishes: [fail(job, 'boom')], now: T0 + 20 })
      expect(await retryJobNow(t.driver, { id: job.id, now: T0 + 500 })).toBe('queued')
      const row = await get(t.driver, job.id)
      expect({ ...row, result: parsed(row.result) }).toMatchObject({ status: 'queued', error: null, attempt: 1, maxAttempts: 2, runAt: T0 + 500, result: 'half' })
      expect((await claimExactly(t.driver, job, newRunnerId(), T0 + 600)).attempt).toBe(2)
    })

    it('keeps max_attempts where it already allows one more attempt', async () => {
      const job = await running(t.driver, newJob({ maxAttempts: 5 }), newRunnerId())
      await t.driver.jobFinishMany({ finishes: [fail(job, 'permanent')], now: T0 + 20 })
      expect(await retryJobNow(t.driver, { id: job.id, now: T0 + 500 })).toBe('queued')
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'queued', attempt: 1, maxAttempts: 5 })
    })

    it("queues a cancelled job again, its cancellation request cleared ('queued')", async () => {
      const runner = newRunnerId()
      const job = await running(t.driver, newJob(), runner)
      expect(await cancelJob(t.driver, { id: job.id, now: T0 + 15 })).toBe('requested')
      await t.driver.jobFinishMany({ finishes: [succeed(job)], now: T0 + 20 })
      expect(await statusOf(t.driver, job.id)).toBe('cancelled')

      expect(await retryJobNow(t.driver, { id: job.id, now: T0 + 500 })).toBe('queued')
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'queued', attempt: 1, maxAttempts: 2, error: null })
      // The request is gone: this run is not cancelled.
      const again = await claimExactly(t.driver, job, runner, T0 + 600)
      expect(await t.driver.jobCancelRequested({ runnerId: runner })).toEqual([])
      await t.driver.jobFinishMany({ finishes: [succeed(again)], now: T0 + 700 })
      expect(await statusOf(t.driver, job.id)).toBe('succeeded')
    })

    it("leaves a queued, running or succeeded job as it is ('not_retryable')", async () => {
      const runner = newRunnerId()
      const done = await running(t.driver, newJob({ kind: 'b' }), runner)
      await t.driver.jobFinishMany({ finishes: [succeed(done, '"r"')], now: T0 + 20 })
      const run = await running(t.driver, newJob({ kind: 'c' }), runner)
      const queued = newJob()
      await insert(t.driver, [queued])
      for (const id of [queued.id, run.id, done.id]) expect(await retryJobNow(t.driver, { id, now: T0 + 500 })).toBe('not_retryable')
      expect(await get(t.driver, queued.id)).toMatchObject({ status: 'queued', runAt: null })
      expect(await get(t.driver, run.id)).toMatchObject({ status: 'running', attempt: 1 })
      expect(await get(t.driver, done.id)).toMatchObject({ status: 'succeeded', attempt: 1, maxAttempts: 1 })
    })

    it("leaves a failed job whose unique key another live job now holds ('unique_key_held')", async () => {
      const failed = await running(t.driver, newJob({ uniqueKey: 'k' }), newRunnerId())
      await t.driver.jobFinishMany({ finishes: [fail(failed, 'boom')], now: T0 + 20 })
      const holder = newJob({ uniqueKey: 'k' })
      expect(await insert(t.driver, [holder], T0 + 30)).toEqual([null])
      expect(await retryJobNow(t.driver, { id: failed.id, now: T0 + 500 })).toBe('unique_key_held')
      expect(await get(t.driver, failed.id)).toMatchObject({ status: 'failed', error: 'boom', maxAttempts: 1 })
      // Once the holder ends, the key is free again.
      expect(await cancelJob(t.driver, { id: holder.id, now: T0 + 600 })).toBe('cancelled')
      expect(await retryJobNow(t.driver, { id: failed.id, now: T0 + 700 })).toBe('queued')
    })

    it("answers 'missing' for an unknown id and for a job of another scope, which it leaves be", async () => {
      const job = await running(t.driver, newJob({ scope: 'tenant-1' }), newRunnerId())
      await t.driver.jobFinishMany({ finishes: [fail(job, 'boom')], now: T0 + 20 })
      expect(await retryJobNow(t.driver, { id: newJob().id, now: T0 + 500 })).toBe('missing')
      expect(await retryJobNow(t.driver, { id: job.id, scope: 'tenant-2', now: T0 + 500 })).toBe('missing')
      expect(await retryJobNow(t.driver, { id: job.id, scope: null, now: T0 + 500 })).toBe('missing')
      expect(await statusOf(t.driver, job.id)).toBe('failed')
      expect(await retryJobNow(t.driver, { id: job.id, scope: 'tenant-1', now: T0 + 500 })).toBe('queued')
    })
  })

  describe('kindPause, kindResume and kindsPaused', () => {
    it('pauses a kind: true the first time, false when already paused, which keeps the first time', async () => {
      expect(await t.driver.kindsPaused()).toEqual([])
      expect(await t.driver.kindPause({ kind: 'a', now: T0 + 1_000 })).toBe(true)
      expect(await t.driver.kindPause({ kind: 'a', now: T0 + 2_000 })).toBe(false)
      expect(await t.driver.kindPause({ kind: 'b', now: T0 + 3_000 })).toBe(true)
      const paused = [...(await t.driver.kindsPaused())].sort((x, y) => x.kind.localeCompare(y.kind))
      expect(paused).toEqual([
        { kind: 'a', pausedAt: T0 + 1_000 },
        { kind: 'b', pausedAt: T0 + 3_000 },
      ])
    })

    it('stops every process claiming the kind until it is resumed', async () => {
      const job = newJob()
      await insert(t.driver, [job])
      await t.driver.kindPause({ kind: 'a', now: T0 })
      const other = t.open()
      expect(await claim(other, { runnerId: newRunnerId() })).toEqual([])
      expect(await statusOf(t.driver, job.id)).toBe('queued')
      expect(await t.driver.kindResume({ kind: 'a' })).toBe(true)
      expect((await claim(other, { runnerId: newRunnerId(), now: T0 + 20 })).map((j) => j.id)).toEqual([job.id])
    })

    it('resumes: true when the kind was paused, false when it was not', async () => {
      await t.driver.kindPause({ kind: 'a', now: T0 })
      expect(await t.driver.kindResume({ kind: 'a' })).toBe(true)
      expect(await t.driver.kindResume({ kind: 'a' })).toBe(false)
      expect(await t.driver.kindResume({ kind: 'never' })).toBe(false)
      expect(await t.driver.kindsPaused()).toEqual([])
    })

    it('keeps a pause for drivers opened later (across restarts)', async () => {
      await t.driver.kindPause({ kind: 'a', now: T0 + 5 })
      await t.driver.close()
      expect(await t.open().kindsPaused()).toEqual([{ kind: 'a', pausedAt: T0 + 5 }])
    })
  })

  describe('jobCounts', () => {
    async function mixed() {
      const runner = newRunnerId()
      await insert(t.driver, [...newJobs(2, { kind: 'a', scope: 'tenant-1' }), newJob({ kind: 'a', scope: null }), newJob({ kind: 'b', scope: 'tenant-2', runAt: T0 + 60_000 })])
      const ran = await running(t.driver, newJob({ kind: 'c', scope: 'tenant-1' }), runner)
      const failed = await running(t.driver, newJob({ kind: 'c', scope: null }), runner)
      await t.driver.jobFinishMany({ finishes: [fail(failed, 'boom')], now: T0 + 20 })
      return { ran }
    }

    it('counts every scope by kind and status, one entry per pair with a job', async () => {
      expect(await t.driver.jobCounts({})).toEqual([])
      await mixed()
      expect(byKindAndStatus(await t.driver.jobCounts({}))).toEqual<JobCount[]>([
        { kind: 'a', status: 'queued', count: 3 },
        { kind: 'b', status: 'scheduled', count: 1 },
        { kind: 'c', status: 'failed', count: 1 },
        { kind: 'c', status: 'running', count: 1 },
      ])
    })

    it('counts only the jobs of `scope` when set (null: unscoped ones)', async () => {
      await mixed()
      expect(byKindAndStatus(await t.driver.jobCounts({ scope: 'tenant-1' }))).toEqual<JobCount[]>([
        { kind: 'a', status: 'queued', count: 2 },
        { kind: 'c', status: 'running', count: 1 },
      ])
      expect(byKindAndStatus(await t.driver.jobCounts({ scope: null }))).toEqual<JobCount[]>([
        { kind: 'a', status: 'queued', count: 1 },
        { kind: 'c', status: 'failed', count: 1 },
      ])
      expect(await t.driver.jobCounts({ scope: 'tenant-404' })).toEqual([])
    })
  })

  describe('jobGet', () => {
    it('reads every field of a job', async () => {
      const job = newJob({ kind: 'k', priority: -2, maxAttempts: 4, runAt: T0 + 60_000, scope: 'tenant-1' })
      await insert(t.driver, [job])
      expect(await t.driver.jobGet({ id: job.id })).toEqual<JobRow>({
        id: job.id,
        kind: 'k',
        status: 'scheduled',
        result: null,
        error: null,
        attempt: 0,
        maxAttempts: 4,
        priority: -2,
        runAt: T0 + 60_000,
      })
    })

    it('finds a job in its own scope or with no scope given; another scope, or null for a scoped job, reads as missing', async () => {
      const scoped = newJob({ scope: 'tenant-1' })
      const unscoped = newJob({ scope: null })
      await insert(t.driver, [scoped, unscoped])
      expect((await t.driver.jobGet({ id: scoped.id }))?.id).toBe(scoped.id)
      expect((await t.driver.jobGet({ id: scoped.id, scope: 'tenant-1' }))?.id).toBe(scoped.id)
      expect(await t.driver.jobGet({ id: scoped.id, scope: 'tenant-2' })).toBeUndefined()
      expect(await t.driver.jobGet({ id: scoped.id, scope: null })).toBeUndefined()
      expect((await t.driver.jobGet({ id: unscoped.id, scope: null }))?.id).toBe(unscoped.id)
      expect(await t.driver.jobGet({ id: unscoped.id, scope: 'tenant-1' })).toBeUndefined()
      expect(await t.driver.jobGet({ id: newJob().id })).toBeUndefined()
    })
  })

  describe('jobList', () => {
    it('reads pages newest first (insertion order), each before the last job of the previous page', async () => {
      const jobs = newJobs(5)
      await insert(t.driver, jobs)
      const [j1, j2, j3, j4, j5] = jobs.map((j) => j.id)
      expect(ids(await t.driver.jobList({ limit: 2 }))).toEqual([j5, j4])
      expect(ids(await t.driver.jobList({ limit: 2, beforeId: j4 }))).toEqual([j3, j2])
      expect(ids(await t.driver.jobList({ limit: 2, beforeId: j2 }))).toEqual([j1])
      expect(await t.driver.jobList({ limit: 2, beforeId: j1 })).toEqual([])
    })

    it('reads each job with every field, as jobGet does', async () => {
      const job = newJob({ priority: 7, maxAttempts: 2 })
      await insert(t.driver, [job])
      expect(await t.driver.jobList({ limit: 10 })).toEqual([await get(t.driver, job.id)])
    })

    it('applies the status and kind filters when set, with the cursor', async () => {
      const runner = newRunnerId()
      const a1 = newJob({ kind: 'a' })
      const b1 = newJob({ kind: 'b' })
      const a2 = newJob({ kind: 'a' })
      const a3 = newJob({ kind: 'a' })
      await insert(t.driver, [a1, b1, a2, a3])
      await claimExactly(t.driver, a1, runner)
      expect(ids(await t.driver.jobList({ limit: 10, kind: 'a' }))).toEqual([a3.id, a2.id, a1.id])
      expect(ids(await t.driver.jobList({ limit: 10, status: 'queued' }))).toEqual([a3.id, a2.id, b1.id])
      expect(ids(await t.driver.jobList({ limit: 10, status: 'queued', kind: 'a' }))).toEqual([a3.id, a2.id])
      expect(ids(await t.driver.jobList({ limit: 10, kind: 'a', beforeId: a3.id }))).toEqual([a2.id, a1.id])
      expect(ids(await t.driver.jobList({ limit: 10, status: 'running' }))).toEqual([a1.id])
      expect(await t.driver.jobList({ limit: 10, status: 'failed' })).toEqual([])
    })

    it('lists only the jobs of `scope` when set (null: unscoped ones), every job when not', async () => {
      const one = newJob({ scope: 'tenant-1' })
      const none = newJob({ scope: null })
      const two = newJob({ scope: 'tenant-2' })
      await insert(t.driver, [one, none, two])
      expect(ids(await t.driver.jobList({ limit: 10 }))).toEqual([two.id, none.id, one.id])
      expect(ids(await t.driver.jobList({ limit: 10, scope: 'tenant-1' }))).toEqual([one.id])
      expect(ids(await t.driver.jobList({ limit: 10, scope: null }))).toEqual([none.id])
      expect(await t.driver.jobList({ limit: 10, scope: 'tenant-404' })).toEqual([])
    })

    it("pages within a scope by that scope's own cursor", async () => {
      const mine = newJobs(3, { scope: 'tenant-1' })
      await insert(t.driver, [mine[0]!, newJob({ scope: 'tenant-2' }), mine[1]!, newJob({ scope: 'tenant-2' }), mine[2]!])
      expect(ids(await t.driver.jobList({ limit: 2, scope: 'tenant-1' }))).toEqual([mine[2]!.id, mine[1]!.id])
      expect(ids(await t.driver.jobList({ limit: 2, scope: 'tenant-1', beforeId: mine[1]!.id }))).toEqual([mine[0]!.id])
    })

    // The cursor of another scope's job reveals nothing of that scope: the page is the one an id no job
    // holds (of the same enqueue time) gives, and holds only the caller's jobs. (The doc's "gives an empty
    // page" is being replaced by placing such a cursor by its id's time; both satisfy this.)
    it("reads a cursor of another scope's job as an id no job has: the page shows nothing of that scope", async () => {
      const early = newJob({ scope: 'tenant-1' })
      const foreign = newJob({ scope: 'tenant-2' })
      const late = newJob({ scope: 'tenant-1' })
      await insert(t.driver, [early, foreign, late])
      // Same enqueue millisecond as `foreign` (an id begins with it), other random bits: no job has it.
      const nobody = foreign.id.slice(0, 24) + (foreign.id.endsWith('000000000000') ? '111111111111' : '000000000000')
      const byForeign = await t.driver.jobList({ limit: 10, scope: 'tenant-1', beforeId: foreign.id })
      const byNobody = await t.driver.jobList({ limit: 10, scope: 'tenant-1', beforeId: nobody })
      expect(ids(byForeign)).toEqual(ids(byNobody))
      expect(ids(byForeign)).not.toContain(foreign.id)
      for (const id of ids(byForeign)) expect([early.id, late.id]).toContain(id)
    })

    // New rule (lands with the list-cursor change): a cursor stays valid after its job is deleted.
    it('still reads the older jobs when the job `beforeId` names has since been deleted', async () => {
      const jobs = newJobs(4)
      await insert(t.driver, jobs)
      const [j1, j2, j3, j4] = jobs.map((j) => j.id)
      expect(ids(await t.driver.jobList({ limit: 2 }))).toEqual([j4, j3])
      expect(await cancelJob(t.driver, { id: j3!, now: T0 + 100 })).toBe('cancelled')
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['cancelled'], finishedBefore: FOREVER, limit: 10 })).toBe(1)
      expect(ids(await t.driver.jobList({ limit: 2, beforeId: j3 }))).toEqual([j2, j1])
    })
  })

  describe('queueCounts', () => {
    it('counts queued and running jobs per kind and scheduled ones across kinds (kind null), leaving out empty pairs and finished jobs', async () => {
      expect(await t.driver.queueCounts({ limit: 100 })).toEqual([])
      const runner = newRunnerId()
      await running(t.driver, newJob({ kind: 'a' }), runner)
      const done = await running(t.driver, newJob({ kind: 'c' }), runner)
      await t.driver.jobFinishMany({ finishes: [succeed(done)], now: T0 + 20 })
      await insert(t.driver, [...newJobs(3, { kind: 'a' }), ...newJobs(2, { kind: 'b' }), newJob({ kind: 'a', runAt: T0 + 60_000 }), newJob({ kind: 'b', runAt: T0 + 90_000 })])
      expect(byKindAndStatus(await t.driver.queueCounts({ limit: 100 }))).toEqual(
        byKindAndStatus<QueueCount>([
          { kind: 'a', status: 'queued', count: 3 },
          { kind: 'a', status: 'running', count: 1 },
          { kind: 'b', status: 'queued', count: 2 },
          { kind: null, status: 'scheduled', count: 2 },
        ]),
      )
    })

    it('counts exactly up to `limit`, and reads `limit` beyond it', async () => {
      const runner = newRunnerId()
      await insert(t.driver, newJobs(3, { kind: 'run' }))
      expect(await claim(t.driver, { runnerId: runner, kinds: ['run'] })).toHaveLength(3)
      await insert(t.driver, [...newJobs(5, { kind: 'a' }), newJob({ kind: 'b' }), ...newJobs(4, { runAt: T0 + 60_000 })])
      expect(byKindAndStatus(await t.driver.queueCounts({ limit: 2 }))).toEqual(
        byKindAndStatus<QueueCount>([
          { kind: 'a', status: 'queued', count: 2 },
          { kind: 'b', status: 'queued', count: 1 },
          { kind: 'run', status: 'running', count: 2 },
          { kind: null, status: 'scheduled', count: 2 },
        ]),
      )
    })
  })
})
