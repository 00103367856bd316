import { describe, expect, it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import {
  FOREVER,
  T0,
  claim,
  claimExactly,
  contract,
  doomedRunner,
  fail,
  get,
  insert,
  newJob,
  newJobs,
  newRunnerId,
  running,
  sorted,
  statusOf,
  succeed,
} from './support.js'
import { cancelJob } from '../../src/runner/job-commands.js'

/**
 * DriverMaintenance: the chores a started runner does on timers (promote
 * due jobs, prune finished ones, fail unserved and interrupted jobs,
 * advance recurring schedules), each asserted clause by clause against
 * its doc comment in src/driver.ts.
 */
describeEachBackend('DriverMaintenance', (backend) => {
  const t = contract(backend)

  describe('jobPromoteDue', () => {
    it('makes up to `limit` scheduled jobs due at `now` queued, earliest due first, and returns how many', async () => {
      const due3 = newJob({ runAt: T0 + 3_000 })
      const due1 = newJob({ runAt: T0 + 1_000 })
      const due2 = newJob({ runAt: T0 + 2_000 })
      const notYet = newJob({ runAt: T0 + 10_000 })
      await insert(t.driver, [due3, due1, due2, notYet], T0)

      expect(await t.driver.jobPromoteDue({ now: T0 + 5_000, limit: 2 })).toBe(2)
      expect(await statusOf(t.driver, due1.id)).toBe('queued')
      expect(await statusOf(t.driver, due2.id)).toBe('queued')
      expect(await statusOf(t.driver, due3.id)).toBe('scheduled')
      expect(await t.driver.jobPromoteDue({ now: T0 + 5_000, limit: 2 })).toBe(1)
      expect(await statusOf(t.driver, due3.id)).toBe('queued')
      expect(await t.driver.jobPromoteDue({ now: T0 + 5_000, limit: 2 })).toBe(0)
      expect(await statusOf(t.driver, notYet.id)).toBe('scheduled')
    })

    it('promotes a job due exactly at `now`, and none a moment before', async () => {
      const job = newJob({ runAt: T0 + 1_000 })
      await insert(t.driver, [job], T0)
      expect(await t.driver.jobPromoteDue({ now: T0 + 999, limit: 10 })).toBe(0)
      expect(await t.driver.jobPromoteDue({ now: T0 + 1_000, limit: 10 })).toBe(1)
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'queued', runAt: T0 + 1_000 })
    })

    it('promotes each due job exactly once across concurrent calls from two processes', async () => {
      await insert(t.driver, newJobs(20, { runAt: T0 + 1_000 }), T0)
      const other = t.open()
      const counts = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? t.driver : other).jobPromoteDue({ now: T0 + 2_000, limit: 3 })))
      expect(counts.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(20)
      const rest = await t.driver.jobPromoteDue({ now: T0 + 2_000, limit: 100 })
      expect(counts.reduce((a, b) => a + b, 0) + rest).toBe(20)
      expect(await t.driver.jobCounts({})).toEqual([{ kind: 'a', status: 'queued', count: 20 }])
    })
  })

  describe('queueNextDue', () => {
    it('is the earliest due time of any scheduled job, or null when none is scheduled', async () => {
      expect(await t.driver.queueNextDue({ now: T0 })).toBeNull()
      await insert(t.driver, [newJob({ runAt: T0 + 7_000 }), newJob({ runAt: T0 + 3_000 }), newJob()], T0)
      expect(await t.driver.queueNextDue({ now: T0 })).toBe(T0 + 3_000)
      await t.driver.jobPromoteDue({ now: T0 + 3_000, limit: 10 })
      expect(await t.driver.queueNextDue({ now: T0 + 3_000 })).toBe(T0 + 7_000)
      await t.driver.jobPromoteDue({ now: T0 + 7_000, limit: 10 })
      expect(await t.driver.queueNextDue({ now: T0 + 7_000 })).toBeNull()
    })
  })

  describe('jobPrune', () => {
    /** One job of `kind` in each status, the finished ones finished at T0 + 100. */
    async function everyStatus(kind: string) {
      const runner = newRunnerId()
      const [ok, bad, gone, run] = [newJob({ kind }), newJob({ kind }), newJob({ kind }), newJob({ kind })]
      const queued = newJob({ kind })
      const scheduled = newJob({ kind, runAt: T0 + 60_000 })
      await insert(t.driver, [ok, bad, gone, run], T0)
      const claimed = await claim(t.driver, { runnerId: runner, kinds: [kind], limit: 3, now: T0 + 10 })
      expect(claimed.map((j) => j.id)).toEqual([ok.id, bad.id, gone.id])
      await t.driver.jobFinishMany({ finishes: [succeed(claimed[0]!), fail(claimed[1]!, 'boom')], now: T0 + 100 })
      expect(await cancelJob(t.driver, { id: gone.id, now: T0 + 100 })).toBe('requested')
      await t.driver.jobFinishMany({ finishes: [succeed(claimed[2]!)], now: T0 + 100 })
      await claimExactly(t.driver, run, runner, T0 + 20)
      await insert(t.driver, [queued, scheduled], T0 + 30)
      return { succeeded: ok, failed: bad, cancelled: gone, running: run, queued, scheduled }
    }

    it('deletes the terminal jobs of `kind` in `statuses` finished before `finishedBefore`, and returns how many', async () => {
      const a = await everyStatus('a')
      const b = await everyStatus('b')
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded', 'cancelled'], finishedBefore: T0 + 101, limit: 10 })).toBe(2)
      expect(await t.driver.jobGet({ id: a.succeeded.id })).toBeUndefined()
      expect(await t.driver.jobGet({ id: a.cancelled.id })).toBeUndefined()
      expect(await statusOf(t.driver, a.failed.id)).toBe('failed')
      for (const job of Object.values(b)) expect(await t.driver.jobGet({ id: job.id })).toBeDefined()
    })

    it('deletes only jobs finished strictly before `finishedBefore`', async () => {
      const a = await everyStatus('a')
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded', 'failed', 'cancelled'], finishedBefore: T0 + 100, limit: 10 })).toBe(0)
      expect(await statusOf(t.driver, a.succeeded.id)).toBe('succeeded')
    })

    it('never deletes a job that is not terminal, whatever its times say', async () => {
      const a = await everyStatus('a')
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded', 'failed', 'cancelled'], finishedBefore: FOREVER, limit: 100 })).toBe(3)
      expect(await statusOf(t.driver, a.running.id)).toBe('running')
      expect(await statusOf(t.driver, a.queued.id)).toBe('queued')
      expect(await statusOf(t.driver, a.scheduled.id)).toBe('scheduled')
    })

    it('deletes at most `limit` per call', async () => {
      const runner = newRunnerId()
      await insert(t.driver, newJobs(5), T0)
      const claimed = await claim(t.driver, { runnerId: runner, limit: 5 })
      await t.driver.jobFinishMany({ finishes: claimed.map((j) => succeed(j)), now: T0 + 100 })
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded'], finishedBefore: FOREVER, limit: 2 })).toBe(2)
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded'], finishedBefore: FOREVER, limit: 2 })).toBe(2)
      expect(await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded'], finishedBefore: FOREVER, limit: 2 })).toBe(1)
      expect(await t.driver.jobCounts({})).toEqual([])
    })

    it('lets calls from many processes at once each delete other jobs, none failing for it', async () => {
      await insert(t.driver, newJobs(12), T0)
      const claimed = await claim(t.driver, { runnerId: newRunnerId(), limit: 12 })
      await t.driver.jobFinishMany({ finishes: claimed.map((j) => succeed(j)), now: T0 + 100 })
      const other = t.open()
      const counts = await Promise.all(
        Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? t.driver : other).jobPrune({ kind: 'a', statuses: ['succeeded'], finishedBefore: FOREVER, limit: 3 })),
      )
      const rest = await t.driver.jobPrune({ kind: 'a', statuses: ['succeeded'], finishedBefore: FOREVER, limit: 100 })
      expect(counts.reduce((a, b) => a + b, 0) + rest).toBe(12)
      expect(await t.driver.jobCounts({})).toEqual([])
    })
  })

  describe('kindsFinished', () => {
    it('names each kind that has terminal jobs once, and no kind whose jobs are all live', async () => {
      expect(await t.driver.kindsFinished()).toEqual([])
      const runner = newRunnerId()
      await insert(t.driver, [...newJobs(2, { kind: 'a' }), newJob({ kind: 'b' }), newJob({ kind: 'c' }), newJob({ kind: 'd' })], T0)
      const claimed = await claim(t.driver, { runnerId: runner, kinds: ['a', 'b', 'c'] })
      const byKind = (kind: string) => claimed.filter((j) => j.kind === kind)
      await t.driver.jobFinishMany({ finishes: [...byKind('a').map((j) => succeed(j)), ...byKind('b').map((j) => fail(j, 'boom'))], now: T0 + 100 })
      // c is running, d queued.
      expect(sorted(await t.driver.kindsFinished())).toEqual(['a', 'b'])
    })
  })

  describe('queueUnservedKinds', () => {
    it('names the kinds of queued jobs that no live runner registered', async () => {
      await insert(t.driver, [newJob({ kind: 'a' }), newJob({ kind: 'b' }), newJob({ kind: 'c' })], T0)
      expect(sorted(await t.driver.queueUnservedKinds({ now: T0 }))).toEqual(['a', 'b', 'c'])
      await t.driver.runnerRegister({ runnerId: newRunnerId(), kinds: ['a'], now: T0 })
      // A live runner of another process serves its kinds too.
      await t.open().runnerRegister({ runnerId: newRunnerId(), kinds: ['c', 'x'], now: T0 })
      expect(sorted(await t.driver.queueUnservedKinds({ now: T0 }))).toEqual(['b'])
    })

    it('names no kind whose jobs are only scheduled, running or finished', async () => {
      const runner = newRunnerId()
      await insert(t.driver, [newJob({ kind: 'later', runAt: T0 + 60_000 })], T0)
      await running(t.driver, newJob({ kind: 'busy' }), runner)
      const done = await running(t.driver, newJob({ kind: 'done' }), runner)
      await t.driver.jobFinishMany({ finishes: [succeed(done)], now: T0 + 20 })
      expect(await t.driver.queueUnservedKinds({ now: T0 + 20 })).toEqual([])
    })

    it('names the kinds of a runner once it unregistered, or once its liveness is lost', async () => {
      await insert(t.driver, [newJob({ kind: 'a' }), newJob({ kind: 'b' })], T0)
      const stopped = newRunnerId()
      await t.driver.runnerRegister({ runnerId: stopped, kinds: ['a'], now: T0 })
      const dead = await doomedRunner(t, t.driver, ['b'])
      expect(await t.driver.queueUnservedKinds({ now: T0 })).not.toContain('a')
      await t.driver.runnerUnregister({ runnerId: stopped })
      await dead.lose()
      expect(sorted(await t.driver.queueUnservedKinds({ now: T0 }))).toEqual(['a', 'b'])
    })

    // New rule (lands with the paused-unserved change): a paused kind's jobs wait for the resume, not a runner.
    it('never names a paused kind', async () => {
      await insert(t.driver, [newJob({ kind: 'a' }), newJob({ kind: 'paused' })], T0)
      expect(await t.driver.kindPause({ kind: 'paused', now: T0 })).toBe(true)
      expect(await t.driver.queueUnservedKinds({ now: T0 })).toEqual(['a'])
      expect(await t.driver.kindResume({ kind: 'paused' })).toBe(true)
      expect(sorted(await t.driver.queueUnservedKinds({ now: T0 }))).toEqual(['a', 'paused'])
    })
  })

  describe('jobFailUnserved', () => {
    it('fails with `error` the queued jobs enqueued before `createdBefore` whose kind no live runner registered, and returns how many', async () => {
      const old = newJob({ kind: 'b' })
      const young = newJob({ kind: 'b' })
      const served = newJob({ kind: 'a' })
      const scheduled = newJob({ kind: 'b', runAt: T0 + 60_000 })
      await insert(t.driver, [old, served, scheduled], T0)
      await insert(t.driver, [young], T0 + 500)
      await t.driver.runnerRegister({ runnerId: newRunnerId(), kinds: ['a'], now: T0 })

      expect(await t.driver.jobFailUnserved({ createdBefore: T0 + 100, error: 'unknown_kind', now: T0 + 1_000 })).toBe(1)
      expect(await get(t.driver, old.id)).toMatchObject({ status: 'failed', error: 'unknown_kind', attempt: 0 })
      expect(await statusOf(t.driver, young.id)).toBe('queued')
      expect(await statusOf(t.driver, served.id)).toBe('queued')
      expect(await statusOf(t.driver, scheduled.id)).toBe('scheduled')
      // Enqueued at T0: not before T0.
      expect(await t.driver.jobFailUnserved({ createdBefore: T0 + 500, error: 'unknown_kind', now: T0 + 1_000 })).toBe(0)
      expect(await t.driver.jobFailUnserved({ createdBefore: T0 + 501, error: 'unknown_kind', now: T0 + 1_000 })).toBe(1)
      // Failed means finished: prune sees them.
      expect(sorted(await t.driver.kindsFinished())).toEqual(['b'])
    })

    it("fails the jobs of a runner's kinds once it unregistered, and never a running job", async () => {
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      const busy = await running(t.driver, newJob(), runner)
      const waiting = newJob()
      await insert(t.driver, [waiting], T0)
      expect(await t.driver.jobFailUnserved({ createdBefore: T0 + 100, error: 'unknown_kind', now: T0 + 1_000 })).toBe(0)
      await t.driver.runnerUnregister({ runnerId: runner })
      expect(await t.driver.jobFailUnserved({ createdBefore: T0 + 100, error: 'unknown_kind', now: T0 + 1_000 })).toBe(1)
      expect(await statusOf(t.driver, waiting.id)).toBe('failed')
      expect(await statusOf(t.driver, busy.id)).toBe('running')
    })

    // New rule (lands with the paused-unserved change).
    it('never fails the jobs of a paused kind', async () => {
      const paused = newJob({ kind: 'paused' })
      const unserved = newJob({ kind: 'b' })
      await insert(t.driver, [paused, unserved], T0)
      await t.driver.kindPause({ kind: 'paused', now: T0 })
      expect(await t.driver.jobFailUnserved({ createdBefore: T0 + 100, error: 'unknown_kind', now: T0 + 1_000 })).toBe(1)
      expect(await statusOf(t.driver, paused.id)).toBe('queued')
      expect(await statusOf(t.driver, unserved.id)).toBe('failed')
    })
  })

  describe('jobFailInterrupted', () => {
    it('fails with `error` the running jobs of a runner that unregistered or never registered, and returns how many', async () => {
      const sweeper = newRunnerId()
      const stopped = newRunnerId()
      await t.driver.runnerRegister({ runnerId: stopped, kinds: ['a'], now: T0 })
      const left = await running(t.driver, newJob({ maxAttempts: 3 }), stopped)
      await t.driver.jobPublish({ id: left.id, attempt: left.attempt, result: '"partial"', now: T0 + 15 })
      await t.driver.runnerUnregister({ runnerId: stopped })
      const unknown = await running(t.driver, newJob({ kind: 'b' }), newRunnerId())

      expect(await t.driver.jobFailInterrupted({ runnerId: sweeper, error: 'interrupted by restart', now: T0 + 1_000 })).toEqual({ failed: 2, requeued: 0 })
      expect(await get(t.driver, left.id)).toMatchObject({ status: 'failed', error: 'interrupted by restart', attempt: 1, result: '"partial"' })
      expect(await get(t.driver, unknown.id)).toMatchObject({ status: 'failed', error: 'interrupted by restart' })
      expect(await t.driver.jobFailInterrupted({ runnerId: sweeper, error: 'interrupted by restart', now: T0 + 2_000 })).toEqual({ failed: 0, requeued: 0 })
    })

    it('fails the jobs of a runner whose liveness signal is lost, and forgets that runner', async () => {
      const dead = await doomedRunner(t, t.driver, ['a'])
      const job = await running(dead.driver, newJob(), dead.runnerId)
      await dead.lose()
      expect(await t.driver.jobFailInterrupted({ runnerId: newRunnerId(), error: 'interrupted by restart', now: T0 + 1_000 })).toEqual({ failed: 1, requeued: 0 })
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'failed', error: 'interrupted by restart' })
      // Forgotten: its heartbeat finds it no longer registered.
      expect(await t.driver.runnerHeartbeat({ runnerId: dead.runnerId, now: T0 + 1_000 })).toBe(false)
    })

    it('never touches the jobs of `runnerId`, registered or not, nor those of a live runner of any process', async () => {
      const sweeper = newRunnerId()
      const own = await running(t.driver, newJob(), sweeper)
      const live = newRunnerId()
      const elsewhere = t.open()
      await elsewhere.runnerRegister({ runnerId: live, kinds: ['b'], now: T0 })
      const theirs = await running(elsewhere, newJob({ kind: 'b' }), live)

      expect(await t.driver.jobFailInterrupted({ runnerId: sweeper, error: 'interrupted by restart', now: T0 + 1_000 })).toEqual({ failed: 0, requeued: 0 })
      expect(await get(t.driver, own.id)).toMatchObject({ status: 'running', error: null })
      expect(await get(t.driver, theirs.id)).toMatchObject({ status: 'running', error: null })
      expect(await t.driver.runnerHeartbeat({ runnerId: live, now: T0 + 1_000 })).toBe(true)
    })

    it('queues again, keeping its attempt, a job that requeues after a crash and has an attempt left; fails one with none left', async () => {
      const gone = newRunnerId()
      const again = await running(t.driver, newJob({ requeueInterrupted: true, maxAttempts: 2 }), gone)
      const spent = await running(t.driver, newJob({ kind: 'b', requeueInterrupted: true, maxAttempts: 1 }), gone)
      expect(await t.driver.jobFailInterrupted({ runnerId: newRunnerId(), error: 'interrupted by restart', now: T0 + 1_000 })).toEqual({ failed: 1, requeued: 1 })
      expect(await get(t.driver, again.id)).toMatchObject({ status: 'queued', error: null, attempt: 1 })
      expect(await get(t.driver, spent.id)).toMatchObject({ status: 'failed', error: 'interrupted by restart' })
      expect((await claimExactly(t.driver, again, newRunnerId(), T0 + 2_000)).attempt).toBe(2)
    })

    it('ends a job whose cancellation was requested as cancelled, never queued, even one that requeues after a crash', async () => {
      const gone = newRunnerId()
      const requeuer = await running(t.driver, newJob({ requeueInterrupted: true, maxAttempts: 3 }), gone)
      const plain = await running(t.driver, newJob({ kind: 'b' }), gone)
      for (const job of [requeuer, plain]) expect(await cancelJob(t.driver, { id: job.id, now: T0 + 15 })).toBe('requested')
      const { requeued } = await t.driver.jobFailInterrupted({ runnerId: newRunnerId(), error: 'interrupted by restart', now: T0 + 1_000 })
      expect(requeued).toBe(0)
      expect(await get(t.driver, requeuer.id)).toMatchObject({ status: 'cancelled', error: null })
      expect(await get(t.driver, plain.id)).toMatchObject({ status: 'cancelled', error: null })
    })
  })

  describe('scheduleAdvance and schedulesRead', () => {
    it("records a new schedule at `tickAt` and stores that tick's jobs in the same call", async () => {
      const job = newJob({ kind: 'nightly' })
      expect(await t.driver.scheduleAdvance({ name: 'nightly', tickAt: T0 + 1_000, jobs: [job], now: T0 + 1_000 })).toEqual({ advanced: true, stored: 1 })
      expect(await t.driver.schedulesRead({ names: ['nightly'] })).toEqual([{ name: 'nightly', lastTickAt: T0 + 1_000 }])
      expect(await statusOf(t.driver, job.id)).toBe('queued')
    })

    it('moves forward for a later tick, with no job for a tick passed over', async () => {
      await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 1_000, jobs: [], now: T0 + 1_000 })
      expect(await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 2_000, jobs: [], now: T0 + 2_500 })).toEqual({ advanced: true, stored: 0 })
      const job = newJob()
      expect(await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 3_000, jobs: [job], now: T0 + 3_000 })).toEqual({ advanced: true, stored: 1 })
      expect(await t.driver.schedulesRead({ names: ['s'] })).toEqual([{ name: 's', lastTickAt: T0 + 3_000 }])
      expect(await t.driver.jobCounts({})).toEqual([{ kind: 'a', status: 'queued', count: 1 }])
    })

    it('writes nothing and resolves false for a tick the schedule is already at or past', async () => {
      await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 2_000, jobs: [newJob()], now: T0 + 2_000 })
      const same = newJob()
      const earlier = newJob()
      expect(await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 2_000, jobs: [same], now: T0 + 2_001 })).toEqual({ advanced: false, stored: 0 })
      expect(await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 1_000, jobs: [earlier], now: T0 + 2_002 })).toEqual({ advanced: false, stored: 0 })
      expect(await t.driver.jobGet({ id: same.id })).toBeUndefined()
      expect(await t.driver.jobGet({ id: earlier.id })).toBeUndefined()
      expect(await t.driver.schedulesRead({ names: ['s'] })).toEqual([{ name: 's', lastTickAt: T0 + 2_000 }])
    })

    it('moves a tick forward exactly once across concurrent calls from two processes', async () => {
      const other = t.open()
      const jobs = newJobs(8)
      const outcomes = await Promise.all(
        jobs.map((job, i) => (i % 2 === 0 ? t.driver : other).scheduleAdvance({ name: 'once', tickAt: T0 + 1_000, jobs: [job], now: T0 + 1_000 + i })),
      )
      expect(outcomes.filter((o) => o.advanced)).toEqual([{ advanced: true, stored: 1 }])
      expect(await t.driver.jobCounts({})).toEqual([{ kind: 'a', status: 'queued', count: 1 }])
      const stored = jobs[outcomes.findIndex((o) => o.advanced)]!
      expect(await statusOf(t.driver, stored.id)).toBe('queued')
    })

    it('keeps unique keys as jobInsertMany does: a held key stores no job, while the tick still moves', async () => {
      const holder = newJob({ uniqueKey: 'daily' })
      await insert(t.driver, [holder], T0)
      const tick = newJob({ uniqueKey: 'daily' })
      expect(await t.driver.scheduleAdvance({ name: 's', tickAt: T0 + 1_000, jobs: [tick], now: T0 + 1_000 })).toEqual({ advanced: true, stored: 0 })
      expect(await t.driver.jobGet({ id: tick.id })).toBeUndefined()
      expect(await t.driver.schedulesRead({ names: ['s'] })).toEqual([{ name: 's', lastTickAt: T0 + 1_000 }])
    })

    it('reads the last tick of each named schedule that has one, leaving out the others', async () => {
      await t.driver.scheduleAdvance({ name: 'one', tickAt: T0 + 1_000, jobs: [], now: T0 })
      await t.driver.scheduleAdvance({ name: 'two', tickAt: T0 + 2_000, jobs: [], now: T0 })
      await t.driver.scheduleAdvance({ name: 'three', tickAt: T0 + 3_000, jobs: [], now: T0 })
      const read = await t.driver.schedulesRead({ names: ['two', 'one', 'never'] })
      expect([...read].sort((x, y) => x.name.localeCompare(y.name))).toEqual([
        { name: 'one', lastTickAt: T0 + 1_000 },
        { name: 'two', lastTickAt: T0 + 2_000 },
      ])
      expect(await t.driver.schedulesRead({ names: [] })).toEqual([])
    })
  })
})
