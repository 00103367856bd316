import { expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERNAL, JobNotRunningError, type JobContext } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track, until } from '../support/wait.js'

describeEachBackend('public and partial results', (backend) => {
  const h = harness(backend)

  it('stores only the projection: a private field never reaches the database', async () => {
    const secret = `private-${crypto.randomUUID()}`
    const runner = h.runner()
    const kind = runner.register('meal_plan', {
      payload: echoPayload,
      result: (plan: { days: number; apiKey: string }) => ({ days: plan.days }),
      handler: async ({ n }, job) => {
        await job.publish({ days: n - 1, apiKey: secret })
        return { days: n, apiKey: secret }
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 7 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ id, kind: 'meal_plan', status: 'succeeded', result: { days: 7 }, error: null })
    // Scanned while open too: SQLite's -wal file exists only until the last connection closes.
    expect(await h.store.dump()).not.toContain(secret)
    await runner.close()
    expect(await h.store.dump()).not.toContain(secret)
    // PostgreSQL's jsonb prints a space after the colon; SQLite keeps the text as written.
    expect(await h.store.dump()).toMatch(/"days": ?7/)
  })

  it('lets a handler destructure its context: publish, fail and finalWriteSignal need no `this`', async () => {
    const runner = h.runner()
    const kind = runner.register('loose', {
      payload: echoPayload,
      failures: ['too_big'],
      result: (r: { n: number }) => r,
      handler: async ({ n }, { publish, fail, finalWriteSignal, signal }) => {
        await publish({ n: -n })
        expect(finalWriteSignal().aborted).toBe(false)
        expect(signal.aborted).toBe(false)
        if (n > 1) fail('too_big')
        return { n }
      },
    })
    const done = track(runner)
    await runner.start()
    const [ok, big] = await kind.enqueueMany([{ n: 1 }, { n: 2 }])
    await done.ends([ok!, big!])
    expect(await runner.get(ok!)).toMatchObject({ status: 'succeeded', result: { n: 1 }, error: null })
    // A failed job keeps its last partial result: the destructured publish landed.
    expect(await runner.get(big!)).toMatchObject({ status: 'failed', result: { n: -2 }, error: 'too_big' })
  })

  it('stores null when a kind declares no projection', async () => {
    const runner = h.runner()
    const kind = runner.register('quiet', { payload: echoPayload, handler: () => ({ token: 'kept-private' }) })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', result: null })
  })

  it('fails with internal_error, quoting nothing, when the projection throws or yields no single JSON value', async () => {
    const marker = `projection-${crypto.randomUUID()}`
    const bad: Record<string, (r: unknown) => unknown> = {
      throws: () => {
        throw new Error(marker)
      },
      undefined: () => undefined,
      fn: () => () => marker,
      nan: () => ({ n: Number.NaN }),
      map: () => new Map([[marker, 1]]),
      date: () => new Date(),
      bigint: () => 1n,
      nested_undefined: () => ({ a: undefined }),
      cycle: () => {
        const o: Record<string, unknown> = {}
        o.o = o
        return o
      },
    }
    const runner = h.runner()
    const ids: string[] = []
    const kinds = Object.entries(bad).map(([name, result]) => runner.register(name, { payload: echoPayload, result, handler: () => marker }))
    const done = track(runner)
    await runner.start()
    for (const kind of kinds) ids.push(await kind.enqueue({ n: 1 }))
    await done.ends(ids)
    for (const id of ids) expect(await runner.get(id), (await runner.get(id)).kind).toMatchObject({ status: 'failed', error: CODE_INTERNAL, result: null })
    // Scanned while open too: SQLite's -wal file exists only until the last connection closes.
    expect(await h.store.dump()).not.toContain(marker)
    await runner.close()
    expect(await h.store.dump()).not.toContain(marker)
  })

  it('returns the latest partial result while the job runs, and refuses publishing once it is not running', async () => {
    const runner = h.runner()
    const steps = [gate(), gate(), gate()]
    const published = [gate(), gate()]
    let context: JobContext<{ day: number }> | undefined
    const kind = runner.register('meal_plan', {
      payload: echoPayload,
      result: (r: { day: number }) => r,
      handler: async (_p, job) => {
        context = job
        await steps[0]!.promise
        await job.publish({ day: 1 })
        published[0]!.open()
        await steps[1]!.promise
        await job.publish({ day: 2 })
        published[1]!.open()
        await steps[2]!.promise
        return { day: 3 }
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.starts(1)
    expect(await until(runner, id, (j) => j.status === 'running')).toMatchObject({ result: null })
    steps[0]!.open()
    await published[0]!.promise
    expect(await runner.get(id)).toMatchObject({ status: 'running', result: { day: 1 } })
    steps[1]!.open()
    await published[1]!.promise
    expect(await runner.get(id)).toMatchObject({ status: 'running', result: { day: 2 } })
    steps[2]!.open()
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', result: { day: 3 } })
    await expect(context!.publish({ day: 4 })).rejects.toBeInstanceOf(JobNotRunningError)
    expect(await runner.get(id)).toMatchObject({ result: { day: 3 } })
  })

  it('keeps the last partial result of a job that fails', async () => {
    const runner = h.runner()
    const kind = runner.register('meal_plan', {
      payload: echoPayload,
      result: (r: { day: number }) => r,
      failures: ['provider_unavailable'],
      handler: async (_p, job) => {
        await job.publish({ day: 1 })
        return job.fail('provider_unavailable')
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ id, kind: 'meal_plan', status: 'failed', result: { day: 1 }, error: 'provider_unavailable' })
  })

  it('rejects a partial result without public JSON, and the job goes on', async () => {
    const runner = h.runner()
    let refused: unknown
    const kind = runner.register('k', {
      payload: z.strictObject({}),
      result: (r: { v: unknown }) => r,
      handler: async (_p, job) => {
        refused = await job.publish({ v: () => 1 }).catch((e: unknown) => e)
        return { v: 1 }
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({})
    await done.ends([id])
    expect(refused).toMatchObject({ code: 'result_not_public' })
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', result: { v: 1 } })
  })
})
