import { describe, expect, it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { T0, contract, fail, insert, newJob, newRunnerId, running, wakeLog } from './support.js'
import { cancelJob, retryJobNow } from '../../src/runner/job-commands.js'

/** A fallback poll short enough that a wake it brings arrives within a test, without any timing assertion. */
const QUICK_POLL_MS = 20

/** A fallback poll that never fires within a test: only a notification can wake. */
const NO_POLL_MS = 3_600_000

/**
 * DriverWakeups: how a runner learns that another process wrote something
 * it should look at. Both methods are optional; a driver without one skips
 * its tests with the reason. The tests wait on the wakes themselves (a
 * test that never gets one times out), never on a clock.
 */
describeEachBackend('DriverWakeups', (backend) => {
  const t = contract(backend)

  it('declares the fallback poll it was opened with (capabilities.pollMs)', () => {
    expect(t.open({ pollIntervalMs: 1_234 }).capabilities.pollMs).toBe(1_234)
  })

  describe('onWake', () => {
    it("calls back with 'jobs' once another process queued a job", async ({ skip }) => {
      const watcher = t.open({ pollIntervalMs: QUICK_POLL_MS })
      if (watcher.onWake === undefined) skip('this driver has no onWake: its database cannot tell other processes of an insert')
      const wakes = wakeLog(watcher)
      const mark = wakes.seen.length
      await insert(t.driver, [newJob()])
      await wakes.after(mark, 'jobs')
      expect(wakes.seen.slice(mark)).toContain('jobs')
    })

    it("calls back with 'cancel' once another process requested the cancellation of a running job", async ({ skip }) => {
      const watcher = t.open({ pollIntervalMs: QUICK_POLL_MS })
      if (watcher.onWake === undefined) skip('this driver has no onWake')
      const job = await running(t.driver, newJob(), newRunnerId())
      const wakes = wakeLog(watcher)
      const mark = wakes.seen.length
      expect(await cancelJob(t.driver, { id: job.id, now: T0 + 100 })).toBe('requested')
      await wakes.after(mark, 'cancel')
      expect(wakes.seen.slice(mark)).toContain('cancel')
    })

    it('stops calling a callback once its stop function is called, while other callbacks still get their wakes', async ({ skip }) => {
      const watcher = t.open({ pollIntervalMs: QUICK_POLL_MS })
      if (watcher.onWake === undefined) skip('this driver has no onWake')
      const stopped = wakeLog(watcher)
      const witness = wakeLog(watcher)
      stopped.stop()
      const before = stopped.seen.length
      const mark = witness.seen.length
      await insert(t.driver, [newJob()])
      // The witness's wake is delivered in the same fan-out the stopped callback would have been in.
      await witness.after(mark, 'jobs')
      expect(stopped.seen.length).toBe(before)
      stopped.stop()
      expect(stopped.seen.length).toBe(before)
    })

    describe('on a database that notifies on commit (no fallback poll within the test)', () => {
      /** A watcher whose only wake can be a notification, listening once its first wake arrives. */
      async function listening() {
        const watcher = t.open({ pollIntervalMs: NO_POLL_MS })
        const wakes = wakeLog(watcher)
        // A listener may have missed commits made before it listened, so it wakes once listening: wait for that.
        await wakes.after(0, 'jobs')
        return wakes
      }

      it("wakes 'jobs' at once for an insert by another process", async ({ skip }) => {
        if (!backend.wakesOnCommit) skip("this database's wake is its fallback poll alone")
        const wakes = await listening()
        const mark = wakes.seen.length
        await insert(t.driver, [newJob()])
        await wakes.after(mark, 'jobs')
        expect(wakes.seen.slice(mark)).toContain('jobs')
      })

      it("wakes 'cancel' at once for a cancellation requested by another process", async ({ skip }) => {
        if (!backend.wakesOnCommit) skip("this database's wake is its fallback poll alone")
        const job = await running(t.driver, newJob(), newRunnerId())
        const wakes = await listening()
        const mark = wakes.seen.length
        expect(await cancelJob(t.driver, { id: job.id, now: T0 + 100 })).toBe('requested')
        await wakes.after(mark, 'cancel')
        expect(wakes.seen.slice(mark)).toContain('cancel')
      })

      it("wakes 'jobs' at once for a job another process ran again with jobRetryNow", async ({ skip }) => {
        if (!backend.wakesOnCommit) skip("this database's wake is its fallback poll alone")
        const job = await running(t.driver, newJob(), newRunnerId())
        await t.driver.jobFinishMany({ finishes: [fail(job, 'boom')], now: T0 + 20 })
        const wakes = await listening()
        const mark = wakes.seen.length
        expect(await retryJobNow(t.driver, { id: job.id, now: T0 + 100 })).toBe('queued')
        await wakes.after(mark, 'jobs')
        expect(wakes.seen.slice(mark)).toContain('jobs')
      })
    })
  })

  describe('changeToken', () => {
    it('stays equal while nothing is written, however much is read', async ({ skip }) => {
      if (t.driver.changeToken === undefined) skip('this driver has no changeToken (optional): event streams read each poll')
      await insert(t.driver, [newJob()])
      const first = await t.driver.changeToken!()
      await t.driver.jobList({ limit: 10 })
      await t.driver.jobCounts({})
      await t.open().jobList({ limit: 10 })
      expect(await t.driver.changeToken!()).toBe(first)
    })

    it('differs once another process committed a write to the jobs, then holds still again', async ({ skip }) => {
      if (t.driver.changeToken === undefined) skip('this driver has no changeToken (optional)')
      const before = await t.driver.changeToken!()
      await insert(t.open(), [newJob()])
      const after = await t.driver.changeToken!()
      expect(after).not.toBe(before)
      expect(await t.driver.changeToken!()).toBe(after)
    })

    it('differs once this driver itself committed a write to the jobs', async ({ skip }) => {
      if (t.driver.changeToken === undefined) skip('this driver has no changeToken (optional)')
      const job = newJob()
      await insert(t.driver, [job])
      const before = await t.driver.changeToken!()
      expect(await cancelJob(t.driver, { id: job.id, now: T0 + 100 })).toBe('cancelled')
      expect(await t.driver.changeToken!()).not.toBe(before)
    })
  })
})
