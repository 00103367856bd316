import { describe, expect, it } from 'vitest'
import { describeEachBackend } from '../support/backends.js'
import { T0, contract, doomedRunner, get, insert, newJob, newRunnerId, running, sorted } from './support.js'

/**
 * DriverPresence: a runner telling the database it is alive, so others can
 * tell when it is gone. How a database proves a runner gone differs
 * (capabilities.liveness: an operating-system lock needs no heartbeat, a
 * lease does); the tests take a runner's liveness away through
 * support.doomedRunner, which follows that capability, so every clause
 * here is written once for both kinds of liveness.
 */
describeEachBackend('DriverPresence', (backend) => {
  const t = contract(backend)

  it('declares its liveness timing: a positive sweep interval, and a heartbeat that is null or positive', () => {
    const { heartbeatMs, sweepMs } = t.driver.capabilities.liveness
    expect(sweepMs).toBeGreaterThan(0)
    if (heartbeatMs !== null) expect(heartbeatMs).toBeGreaterThan(0)
    expect(t.open({ sweepIntervalMs: 1_234 }).capabilities.liveness.sweepMs).toBe(1_234)
  })

  describe('runnerRegister', () => {
    it('records a live runner of its kinds, for this process and every other', async () => {
      await insert(t.driver, [newJob({ kind: 'a' }), newJob({ kind: 'b' })])
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      expect(await t.driver.queueUnservedKinds({ now: T0 })).toEqual(['b'])
      expect(await t.open().queueUnservedKinds({ now: T0 })).toEqual(['b'])
      expect(await t.driver.runnerHeartbeat({ runnerId: runner, now: T0 + 1 })).toBe(true)
    })

    it('updates the kinds when the runner registers again', async () => {
      await insert(t.driver, [newJob({ kind: 'a' }), newJob({ kind: 'b' }), newJob({ kind: 'c' })])
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['b', 'c'], now: T0 + 1 })
      expect(await t.driver.queueUnservedKinds({ now: T0 + 1 })).toEqual(['a'])
    })

    it('keeps a running job of a registered runner from any sweep', async () => {
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      const job = await running(t.driver, newJob(), runner)
      expect(await t.open().jobFailInterrupted({ runnerId: newRunnerId(), error: 'interrupted by restart', now: T0 + 1_000 })).toEqual({ failed: 0, requeued: 0 })
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'running', error: null })
    })
  })

  describe('runnerKinds', () => {
    it("lists the kinds of the live runners, each once and sorted, seen from any process; a runner's are gone once it is", async () => {
      expect(await t.driver.runnerKinds()).toEqual([])
      const one = newRunnerId()
      await t.driver.runnerRegister({ runnerId: one, kinds: ['meal_plan', 'import'], now: T0 })
      await t.open().runnerRegister({ runnerId: newRunnerId(), kinds: ['import', 'digest'], now: T0 })
      expect(await t.open().runnerKinds()).toEqual(['digest', 'import', 'meal_plan'])
      // A runner proven gone (its lock released, or its short lease lapsed) lists nothing; on PostgreSQL it also
      // registered a probe kind of its own, and its lease may lapse before this reads: only the end state is asserted.
      const dead = await doomedRunner(t, t.driver, ['mail'])
      await dead.lose()
      expect(await t.open().runnerKinds()).toEqual(['digest', 'import', 'meal_plan'])
      await t.driver.runnerUnregister({ runnerId: one })
      expect(await t.open().runnerKinds()).toEqual(['digest', 'import'])
    })
  })

  describe('runnerHeartbeat', () => {
    it('is true while the runner is registered, and false for a runner never registered', async () => {
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      expect(await t.driver.runnerHeartbeat({ runnerId: runner, now: T0 + 1_000 })).toBe(true)
      expect(await t.driver.runnerHeartbeat({ runnerId: runner, now: T0 + 2_000 })).toBe(true)
      expect(await t.driver.runnerHeartbeat({ runnerId: newRunnerId(), now: T0 + 2_000 })).toBe(false)
    })

    it('is false once the runner lost its liveness and another runner failed its jobs; registering again makes it live', async () => {
      const dead = await doomedRunner(t, t.driver, ['a'])
      const job = await running(dead.driver, newJob(), dead.runnerId)
      await dead.lose()
      expect((await t.driver.jobFailInterrupted({ runnerId: newRunnerId(), error: 'interrupted by restart', now: T0 + 1_000 })).failed).toBe(1)
      expect(await t.driver.runnerHeartbeat({ runnerId: dead.runnerId, now: T0 + 1_000 })).toBe(false)

      // The caller registers again, its earlier claim lost to the fence.
      await t.driver.runnerRegister({ runnerId: dead.runnerId, kinds: ['a'], now: T0 + 2_000 })
      expect(await t.driver.runnerHeartbeat({ runnerId: dead.runnerId, now: T0 + 2_000 })).toBe(true)
      expect(await t.driver.jobFinishMany({ finishes: [{ id: job.id, attempt: job.attempt, status: 'succeeded', result: null, error: null, runAt: null }], now: T0 + 2_000 })).toEqual([false])
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'failed', error: 'interrupted by restart' })
    })
  })

  describe('runnerUnregister', () => {
    it('forgets the runner: its heartbeat is false and its kinds are unserved', async () => {
      await insert(t.driver, [newJob({ kind: 'a' })])
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      await t.driver.runnerUnregister({ runnerId: runner })
      expect(await t.driver.runnerHeartbeat({ runnerId: runner, now: T0 + 1 })).toBe(false)
      expect(await t.driver.queueUnservedKinds({ now: T0 + 1 })).toEqual(['a'])
    })

    it('leaves a job the runner left running to the next sweep, by any process', async () => {
      const runner = newRunnerId()
      await t.driver.runnerRegister({ runnerId: runner, kinds: ['a'], now: T0 })
      const job = await running(t.driver, newJob(), runner)
      await t.driver.runnerUnregister({ runnerId: runner })
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'running' })
      expect(await t.open().jobFailInterrupted({ runnerId: newRunnerId(), error: 'interrupted by restart', now: T0 + 1_000 })).toEqual({ failed: 1, requeued: 0 })
      expect(await get(t.driver, job.id)).toMatchObject({ status: 'failed', error: 'interrupted by restart' })
    })

    it('releases only that runner: the other runners of the process stay live', async () => {
      await insert(t.driver, [newJob({ kind: 'a' }), newJob({ kind: 'b' })])
      const [one, two] = [newRunnerId(), newRunnerId()]
      await t.driver.runnerRegister({ runnerId: one, kinds: ['a'], now: T0 })
      await t.driver.runnerRegister({ runnerId: two, kinds: ['b'], now: T0 })
      await t.driver.runnerUnregister({ runnerId: one })
      expect(sorted(await t.open().queueUnservedKinds({ now: T0 }))).toEqual(['a'])
      expect(await t.driver.runnerHeartbeat({ runnerId: two, now: T0 + 1 })).toBe(true)
    })
  })
})
