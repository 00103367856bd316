import { expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERRUPTED, CODE_UNKNOWN_KIND, defineKind, InvalidPayloadError, UnknownKindError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { aborted, gate, track, until } from '../support/wait.js'

// Kind definitions as an application shares them between its web and worker processes.
const kindA = defineKind('a', { payload: z.strictObject({ n: z.number().int() }) })
const kindB = defineKind('b', {
  payload: z.strictObject({ n: z.number().int() }),
  result: (r: { doubled: number }) => r,
  failures: ['too_big'],
})

describeEachBackend('deployments', (backend) => {
  const h = harness(backend)

  it('the unserved kinds are exactly the kinds of queued jobs no live runner has, whatever the order of the kinds', async () => {
    const payload = z.strictObject({ n: z.number().int() })
    const serving = h.runner({ workers: 1 })
    const hold = gate()
    for (const kind of ['b', 'd']) serving.register(kind, { payload, handler: async () => void (await hold.promise) })
    const web = h.runner()
    const handles = Object.fromEntries(['a', 'b', 'c', 'd', 'e'].map((kind) => [kind, web.register(defineKind(kind, { payload }))]))
    // Enqueued out of the kinds' order, several of some, one of others.
    for (const kind of ['e', 'b', 'a', 'e', 'd', 'c', 'a', 'b']) await handles[kind]!.enqueue({ n: 0 })
    await serving.start()
    const driver = h.store.driver()
    try {
      expect((await driver.queueUnservedKinds({ now: Date.now() })).sort()).toEqual(['a', 'c', 'e'])
    } finally {
      await driver.close()
      hold.open()
    }
  })

  it('a rolling deploy: runners with different kinds share the queue, and every job of the new kind runs on the runner that has it', async () => {
    const old = h.runner({ workers: 2 }) // the old version: kind a only
    const ran = new Map<string, string>()
    old.register(kindA, (_p, job) => void ran.set(job.id, 'old'))
    const next = h.runner({ workers: 2 }) // the new version: a and b
    next.register(kindA, (_p, job) => void ran.set(job.id, 'next'))
    next.register(kindB, ({ n }, job) => {
      ran.set(job.id, 'next')
      return { doubled: 2 * n }
    })
    const web = h.runner() // a producer: definitions, no handlers, never started
    const a = web.register(kindA)
    const b = web.register(kindB)
    const doneOld = track(old)
    const doneNext = track(next)
    // The old runner starts first and is idle when the jobs arrive: it must leave the b jobs alone.
    await old.start()
    await next.start()
    const bIds = await b.enqueueMany(Array.from({ length: 20 }, (_, n) => ({ n })))
    const aIds = await Promise.all(Array.from({ length: 20 }, (_, n) => a.enqueue({ n })))
    old.wake()
    next.wake()
    await until(web, bIds[19]!, (j) => j.status === 'succeeded')
    for (const id of [...aIds, ...bIds]) {
      await until(web, id, (j) => j.status !== 'queued' && j.status !== 'running')
    }
    for (const id of bIds) {
      expect(await web.get(id)).toMatchObject({ status: 'succeeded', error: null })
      expect(ran.get(id)).toBe('next')
    }
    for (const id of aIds) expect((await web.get(id)).status).toBe('succeeded')
    expect(doneOld.started.filter((id) => bIds.includes(id))).toEqual([])
    expect(doneNext.started.filter((id) => bIds.includes(id))).toHaveLength(20)
  })

  it('a producer process enqueues, validates, reads and lists with no handler and no started worker', async () => {
    const web = h.runner()
    const b = web.register(kindB)
    const id = await b.enqueue({ n: 1 }, { scope: 'h1' })
    const [many] = await b.enqueueMany([{ n: 2 }])
    const dynamic = await web.enqueue('b', { n: 3 })
    await expect(web.enqueue('b', { n: 'three' })).rejects.toBeInstanceOf(InvalidPayloadError)
    await expect(web.enqueue('c', { n: 3 })).rejects.toBeInstanceOf(UnknownKindError)
    let txId: unknown
    await h.store.transaction((tx) => {
      txId = b.enqueueTx(tx as never, { n: 4 })
      return txId
    }, 'commit')
    expect(web.kind('b')).toEqual({ name: 'b', enqueueOverHttp: false, handled: false, failures: ['too_big'] })
    expect((await web.get(id, { scope: 'h1' })).status).toBe('queued')
    const listed = (await web.list()).jobs.map((j) => j.id)
    expect(listed).toHaveLength(4)
    expect(listed).toEqual(expect.arrayContaining([id, many, dynamic, await txId]))

    // A worker elsewhere runs them; the producer, even started, claims nothing.
    await web.start()
    const worker = h.runner()
    worker.register(kindB, ({ n }) => ({ doubled: 2 * n }))
    const done = track(worker)
    await worker.start()
    worker.wake()
    const ids = [id, many!, dynamic, (await txId) as string]
    await done.ends(ids)
    for (const jobId of ids) expect((await web.get(jobId)).status).toBe('succeeded')
    expect(await web.get(id)).toMatchObject({ result: { doubled: 2 } })
  })

  it('a queued job whose kind no live runner handles waits, is reported once, and fails as unknown_kind only after the grace', async () => {
    let now = 1_000_000
    const clock = () => now
    const logs = captureLogs()
    const worker = h.runner({ clock, logger: logs, unknownKindGraceMs: 200, driver: h.store.driver({ sweepIntervalMs: 10 }) })
    worker.register(kindA, () => undefined)
    const web = h.runner({ clock })
    const b = web.register(kindB)
    const ids = await b.enqueueMany([{ n: 1 }, { n: 2 }])
    await worker.start()
    const warned = () => logs.lines.filter((l) => l.level === 'warn' && l.fields.kind === 'b')
    while (warned().length === 0) await new Promise((r) => setTimeout(r, 10))
    // More passes (every 200 ms of real time): still one warning, and still queued, the clock not having moved.
    await new Promise((r) => setTimeout(r, 450))
    expect(warned()).toHaveLength(1)
    for (const id of ids) expect((await web.get(id)).status).toBe('queued')
    now += 201
    for (const id of ids) {
      expect(await until(web, id, (j) => j.status === 'failed')).toMatchObject({ status: 'failed', error: CODE_UNKNOWN_KIND })
    }
  })

  it('gives each job its own signal: what a handler attaches is released when its job ends, and stop aborts the running ones', async () => {
    const runner = h.runner({ workers: 2 })
    const fired: number[] = []
    const signals: AbortSignal[] = []
    const hold = gate()
    const kind = runner.register('echo', {
      payload: z.strictObject({ n: z.number().int() }),
      handler: async ({ n }, job) => {
        signals.push(job.signal)
        job.signal.addEventListener('abort', () => fired.push(n))
        if (n === 2) await aborted(job.signal)
        else if (n === 1) await hold.promise
      },
    })
    const done = track(runner)
    const [first] = await kind.enqueueMany([{ n: 1 }])
    await runner.start()
    await done.starts(1)
    hold.open()
    await done.ends([first!])
    await kind.enqueue({ n: 2 })
    await done.starts(2)
    await runner.stop()
    // Only the job still running saw the abort; the ended job's listener was never called.
    expect(fired).toEqual([2])
    expect(signals[0]).not.toBe(signals[1])
    expect(signals[0]!.aborted).toBe(false)
  })

  it('stop({ timeoutMs }) resolves while a handler ignores its signal; the job stays running and the next start fails it as interrupted', async () => {
    const logs = captureLogs()
    const runner = h.runner({ logger: logs })
    const never = new Promise<void>(() => {})
    const kind = runner.register('stuck', { payload: z.strictObject({}), handler: () => never })
    const done = track(runner)
    const id = await kind.enqueue({})
    await runner.start()
    await done.starts(1)
    await runner.stop({ timeoutMs: 50 })
    expect(logs.lines.find((l) => l.level === 'warn' && l.fields.running === 1)).toBeDefined()
    expect((await runner.get(id)).status).toBe('running')
    const next = h.runner()
    next.register('stuck', { payload: z.strictObject({}), handler: () => undefined })
    await next.start()
    expect(await next.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERRUPTED })
  })

  it('a runner default stop timeout applies to stop() without options', async () => {
    const runner = h.runner({ stopTimeoutMs: 30 })
    const kind = runner.register('stuck', { payload: z.strictObject({}), handler: () => new Promise<void>(() => {}) })
    const done = track(runner)
    const id = await kind.enqueue({})
    await runner.start()
    await done.starts(1)
    await runner.stop()
    expect((await runner.get(id)).status).toBe('running')
  })
})
