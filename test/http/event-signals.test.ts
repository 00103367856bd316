import { expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'
import { servers } from './client.js'

/** No poll within a test: only a signal can bring an event. */
const NO_POLL = 3_600_000

const steps = z.strictObject({ steps: z.number().int() })

describeEachBackend('event streams without the poll', (backend) => {
  const h = harness(backend)
  const s = servers()

  it('a job run in this process: each partial result is an event of its own, at once, with no poll', async () => {
    const runner = h.runner()
    const seen = [gate(), gate()]
    const finish = gate()
    const kind = runner.register('stepped', {
      payload: steps,
      result: (r: { step: number }) => r,
      handler: async ({ steps: n }, job) => {
        for (let step = 1; step <= n; step++) {
          await job.publish({ step })
          await seen[step - 1]!.promise
        }
        await finish.promise
        return { step: n + 1 }
      },
    })
    await runner.start()
    const api = await s.serve(runner, { eventsPollMs: NO_POLL })
    const id = await kind.enqueue({ steps: 2 })
    const stream = await api.events(id)
    const results: unknown[] = []
    for (;;) {
      const event = await stream.next()
      const job = JSON.parse(event!.data) as { status: string; result: { step: number } | null }
      results.push(job.result)
      if (job.result?.step === 1) seen[0]!.open()
      if (job.result?.step === 2) {
        seen[1]!.open()
        finish.open()
      }
      if (job.status === 'succeeded') break
    }
    // Each publish, and the end, came as its own event: no two merged into one read, and none waited for a poll.
    expect(results.filter((r) => r !== null)).toEqual([{ step: 1 }, { step: 2 }, { step: 3 }])
  })

  it('a job run by another process: its published results reach the stream with no poll on PostgreSQL (its channel), and within the poll on a store without one', async () => {
    const apiRunner = h.runner()
    const worker = h.runner({ driver: h.store.driver() })
    const running = gate()
    const seen = gate()
    const finish = gate()
    worker.register('stepped', {
      payload: steps,
      result: (r: { step: number }) => r,
      handler: async (_payload, job) => {
        // Published once the stream has shown the job running: the start's signal (a channel of this test's process) is spent.
        await running.promise
        // Published again until the stream shows it: the API's listening connection opens with the stream's first watch, and a
        // notification sent before it listens is heard by no one (in production the poll then brings it; here there is none).
        let shown = false
        void seen.promise.then(() => (shown = true))
        while (!shown) {
          await job.publish({ step: 1 })
          await new Promise((resolve) => setTimeout(resolve, 25))
        }
        await finish.promise
        return { step: 2 }
      },
    })
    const kind = apiRunner.register(defineKind('stepped', { payload: steps }))
    const api = await s.serve(apiRunner, { eventsPollMs: backend.wakesOnCommit ? NO_POLL : 20 })
    const id = await kind.enqueue({ steps: 1 })
    const started = track(worker)
    await worker.start()
    await started.starts(1)
    // Opened once the job runs, and read twice at its opening: no later signal of its start is waited for.
    const stream = await api.events(id)
    expect(JSON.parse((await stream.next())!.data)).toMatchObject({ status: 'running', result: null })
    running.open()
    const published = JSON.parse((await stream.next())!.data) as { status: string; result: { step: number } | null }
    expect(published).toMatchObject({ status: 'running', result: { step: 1 } })
    seen.open()
    // The final write sends no notification: read on PostgreSQL at the poll, which this stream has turned off, so it ends by closing.
    finish.open()
    await stream.cancel()
  })

  it('with a change token (SQLite), idle streams cost one token read per poll for all of them, and no read of their jobs', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver })
    const kind = runner.register(defineKind('echo', { payload: echoPayload }))
    if (faulty.driver.changeToken === undefined) return // PostgreSQL reads each job per poll, as before
    const api = await s.serve(runner, { eventsPollMs: 10 })
    const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }])
    const streams = await Promise.all(ids.map((id) => api.events(id)))
    for (const stream of streams) await stream.next()
    const tokensBefore = faulty.calls['changeToken'] ?? 0
    // Wait for many polls of the token.
    while ((faulty.calls['changeToken'] ?? 0) < tokensBefore + 20) await new Promise((r) => setTimeout(r, 5))
    const readsAt = faulty.calls['jobGet'] ?? 0
    while ((faulty.calls['changeToken'] ?? 0) < tokensBefore + 40) await new Promise((r) => setTimeout(r, 5))
    expect(faulty.calls['jobGet'] ?? 0).toBe(readsAt)
    // A write by another connection moves the token: every stream reads its job once more.
    await runner.cancel(ids[0]!)
    const cancelled = JSON.parse((await streams[0]!.next())!.data) as { status: string }
    expect(cancelled.status).toBe('cancelled')
    for (const stream of streams) await stream.cancel()
  })
})
