import { expect, it } from 'vitest'
import { CODE_INTERRUPTED, FINAL_WRITE_TIMEOUT_MS, Runner, RunnerStateError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { aborted, gate, track } from '../support/wait.js'

describeEachBackend('restart and shutdown', (backend) => {
  const h = harness(backend)

  it('a handler that fails after stop began leaves its job running; the next start fails it as interrupted, never running it twice', async () => {
    const ledger = new Map<string, number>()
    const count = (id: string) => ledger.set(id, (ledger.get(id) ?? 0) + 1)
    const first = h.runner({ workers: 2 })
    const kind = first.register('meal_plan', {
      payload: echoPayload,
      handler: async (_p, job) => {
        count(job.id)
        await aborted(job.signal)
        throw new Error('aborted')
      },
    })
    const done = track(first)
    await first.start()
    const ids = [await kind.enqueue({ n: 1 }), await kind.enqueue({ n: 2 })]
    await done.starts(2)
    await first.close()
    expect(done.ended.size).toBe(0)

    const logs = captureLogs()
    const second = h.runner({ logger: logs })
    second.register('meal_plan', { payload: echoPayload, handler: async (_p, job) => void count(job.id) })
    expect((await second.get(ids[0]!)).status).toBe('running')
    await second.start()
    for (const id of ids) expect(await second.get(id)).toMatchObject({ id, kind: 'meal_plan', status: 'failed', result: null, error: CODE_INTERRUPTED })
    expect(logs.lines).toContainEqual({ level: 'warn', fields: { count: 2 }, message: 'failed jobs interrupted by restart' })
    await second.stop()
    for (const id of ids) expect(ledger.get(id)).toBe(1)
  })

  it('records a job that finishes after stop began', async () => {
    const runner = h.runner()
    const kind = runner.register('meal_plan', {
      payload: echoPayload,
      result: (r: string) => r,
      handler: async (_p, job) => {
        await aborted(job.signal)
        // Stopping: the handler saves what it has and returns it.
        expect(job.finalWriteSignal().aborted).toBe(false)
        return 'saved during shutdown'
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)
    await runner.stop()
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', result: 'saved during shutdown' })
  })

  it('stop resolves only once every handler has returned, and await using closes the runner', async () => {
    let inFlight = 0
    let runnerRef: Runner | undefined
    const id = await (async () => {
      await using runner = h.runner({ workers: 3 })
      runnerRef = runner
      const kind = runner.register('slow', {
        payload: echoPayload,
        handler: async (_p, job) => {
          inFlight++
          await aborted(job.signal)
          await new Promise((resolve) => setTimeout(resolve, 20))
          inFlight--
        },
      })
      const done = track(runner)
      await runner.start()
      const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }])
      await done.starts(3)
      await runner.stop()
      expect(inFlight).toBe(0)
      return ids[0]!
    })()
    // Disposed: the driver is closed, so reading through it fails.
    await expect(runnerRef!.get(id)).rejects.toThrow()
  })

  it('a final write that fails once stopping leaves the job running for the next start', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver })
    const kind = runner.register('meal_plan', {
      payload: echoPayload,
      handler: async (_p, job) => {
        await aborted(job.signal)
        return 'done'
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)
    faulty.failUntilCleared('jobFinishMany')
    await runner.stop()
    expect(faulty.calls.jobFinishMany).toBe(1)
    expect((await runner.get(id)).status).toBe('running')
    await runner.close()

    const next = h.runner()
    next.register('meal_plan', { payload: echoPayload, handler: () => 'again' })
    await next.start()
    expect(await next.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED })
  })

  it('puts back in the queue jobs a claim returned after stop began; they run once at the next start', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver, workers: 2 })
    let starts = 0
    const kind = runner.register('meal_plan', { payload: echoPayload, handler: () => void starts++ })
    // The runner's first claim is held from before it starts, so no claim can be in flight unheld when the job is enqueued
    // (on PostgreSQL an unheld first claim could reach the server after the insert and take the job).
    const release = gate()
    const held = faulty.holdNext('jobClaim', release.promise)
    await runner.start()
    await held // the claim is on its way to the database
    const id = await kind.enqueue({ n: 1 })
    const stopped = runner.stop()
    release.open()
    await stopped
    expect(starts).toBe(0)
    expect((await runner.get(id)).status).toBe('queued')
    await runner.close()

    const next = h.runner()
    next.register('meal_plan', { payload: echoPayload, handler: () => void starts++ })
    const done = track(next)
    await next.start()
    await done.ends([id])
    expect(await next.get(id)).toMatchObject({ status: 'succeeded' })
    expect(starts).toBe(1)
  })

  it('a stop during start undoes it: no claim is made and no timer outlives close', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver })
    const kind = runner.register('meal_plan', { payload: echoPayload, handler: () => undefined })
    await kind.enqueue({ n: 1 })
    const starting = runner.start()
    await runner.close()
    await starting.catch(() => undefined)
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(faulty.calls.jobClaim ?? 0).toBe(0)
    await expect(runner.start()).rejects.toBeInstanceOf(RunnerStateError)
  })

  it('wait() resolves once the runner has stopped: at once for one never started, also after a stop before start', async () => {
    const never = h.runner()
    await never.wait()
    const stoppedFirst = h.runner()
    await stoppedFirst.stop()
    await stoppedFirst.wait()
    const runner = h.runner()
    runner.register('meal_plan', { payload: echoPayload, handler: () => undefined })
    await runner.start()
    let waited = false
    const waiting = runner.wait().then(() => (waited = true))
    await new Promise((resolve) => setImmediate(resolve))
    expect(waited).toBe(false)
    await runner.stop()
    await waiting
    expect(waited).toBe(true)
  })

  it(`gives handlers a final-write signal that outlives stop but ends after ${FINAL_WRITE_TIMEOUT_MS} ms`, async () => {
    const runner = h.runner()
    let reason: unknown
    let lasted = 0
    const kind = runner.register('meal_plan', {
      payload: echoPayload,
      handler: async (_p, job) => {
        await aborted(job.signal)
        const since = performance.now()
        const last = job.finalWriteSignal()
        reason = await new Promise((resolve) => last.addEventListener('abort', () => resolve(last.reason)))
        lasted = performance.now() - since
      },
    })
    const done = track(runner)
    await runner.start()
    await kind.enqueue({ n: 1 })
    await done.starts(1)
    await runner.stop()
    expect(reason).toMatchObject({ name: 'TimeoutError' })
    // A lower bound only: a busy machine makes timers late, never early.
    expect(lasted).toBeGreaterThanOrEqual(FINAL_WRITE_TIMEOUT_MS - 50)
  }, 20_000)
})
