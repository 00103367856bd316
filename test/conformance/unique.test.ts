import { expect, it } from 'vitest'
import { defineKind, InvalidArgumentError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

const plan = defineKind('plan_week', { payload: echoPayload })

describeEachBackend('unique jobs', (backend) => {
  const h = harness(backend)

  /** How many jobs the store holds, all statuses, read through the runner's list. */
  async function stored(runner: ReturnType<typeof h.runner>): Promise<string[]> {
    return (await runner.list({ limit: 100 })).jobs.map((j) => j.id)
  }

  it('a second enqueue with the key of a queued job stores nothing and answers with that job, saying so', async () => {
    const web = h.runner()
    const kind = web.register(plan)
    const first = await kind.enqueueUnique({ n: 1 }, { uniqueKey: 'week-49' })
    const second = await kind.enqueueUnique({ n: 2 }, { uniqueKey: 'week-49' })
    expect(first.created).toBe(true)
    expect(second).toEqual({ id: first.id, created: false })
    expect(await kind.enqueue({ n: 3 }, { uniqueKey: 'week-49' })).toBe(first.id)
    expect(await stored(web)).toEqual([first.id])
  })

  it('the key is per kind and per scope: other kinds, other scopes and no scope each hold their own', async () => {
    const web = h.runner()
    const a = web.register(plan)
    const b = web.register(defineKind('import_recipe', { payload: echoPayload }))
    const results = [
      await a.enqueueUnique({ n: 1 }, { uniqueKey: 'k' }),
      await a.enqueueUnique({ n: 1 }, { uniqueKey: 'k', scope: 'h1' }),
      await a.enqueueUnique({ n: 1 }, { uniqueKey: 'k', scope: 'h2' }),
      await b.enqueueUnique({ n: 1 }, { uniqueKey: 'k' }),
      await a.enqueueUnique({ n: 1 }, { uniqueKey: 'other' }),
    ]
    expect(results.map((r) => r.created)).toEqual([true, true, true, true, true])
    expect(new Set(results.map((r) => r.id)).size).toBe(5)
    // Jobs without a key are never deduplicated.
    expect(await a.enqueue({ n: 1 })).not.toBe(await a.enqueue({ n: 1 }))
  })

  it('the key stays taken while the job is scheduled or running, and is free once it is terminal', async () => {
    const runner = h.runner({ workers: 1 })
    const hold = gate()
    const kind = runner.register(plan, async () => void (await hold.promise))
    const scheduled = await kind.enqueueUnique({ n: 1 }, { uniqueKey: 'later', delayMs: 3_600_000 })
    expect(await kind.enqueueUnique({ n: 2 }, { uniqueKey: 'later' })).toEqual({ id: scheduled.id, created: false })
    const done = track(runner)
    const running = await kind.enqueueUnique({ n: 3 }, { uniqueKey: 'now' })
    await runner.start()
    await done.starts(1)
    expect((await runner.get(running.id)).status).toBe('running')
    expect(await kind.enqueueUnique({ n: 4 }, { uniqueKey: 'now' })).toEqual({ id: running.id, created: false })
    hold.open()
    await done.ends([running.id])
    expect((await runner.get(running.id)).status).toBe('succeeded')
    const again = await kind.enqueueUnique({ n: 5 }, { uniqueKey: 'now' })
    expect(again.created).toBe(true)
    expect(again.id).not.toBe(running.id)
    await done.ends([again.id])
  })

  it('a cancelled job frees its key', async () => {
    const web = h.runner()
    const kind = web.register(plan)
    const first = await kind.enqueueUnique({ n: 1 }, { uniqueKey: 'k' })
    expect(await web.cancel(first.id)).toBe('cancelled')
    const second = await kind.enqueueUnique({ n: 1 }, { uniqueKey: 'k' })
    expect(second.created).toBe(true)
    expect(second.id).not.toBe(first.id)
  })

  it('enqueues of one key in the same turn store exactly one job, and every caller gets its id', async () => {
    const web = h.runner()
    const kind = web.register(plan)
    const results = await Promise.all(Array.from({ length: 10 }, (_, n) => kind.enqueueUnique({ n }, { uniqueKey: 'same' })))
    expect(results.filter((r) => r.created)).toHaveLength(1)
    const winner = results.find((r) => r.created)!.id
    expect(new Set(results.map((r) => r.id))).toEqual(new Set([winner]))
    expect(await stored(web)).toEqual([winner])
  })

  it('enqueueMany with a key stores the first payload only; every id is that job', async () => {
    const web = h.runner()
    const kind = web.register(plan)
    const ids = await kind.enqueueMany([{ n: 1 }, { n: 2 }, { n: 3 }], { uniqueKey: 'batch' })
    expect(new Set(ids).size).toBe(1)
    expect(await stored(web)).toEqual([ids[0]])
    expect(await kind.enqueueMany([{ n: 4 }], { uniqueKey: 'batch' })).toEqual([ids[0]])
  })

  it('enqueueTx: a duplicate answers with the holder; a rolled-back enqueue leaves the key free', async () => {
    const web = h.runner()
    const kind = web.register(plan)
    let rolledBack: unknown
    await h.store.transaction((tx) => (rolledBack = kind.enqueueTx(tx as never, { n: 1 }, { uniqueKey: 'tx' })), 'rollback')
    await rolledBack
    let committed: unknown
    await h.store.transaction((tx) => (committed = kind.enqueueTx(tx as never, { n: 2 }, { uniqueKey: 'tx' })), 'commit')
    const id = (await committed) as string
    expect(await stored(web)).toEqual([id])
    let duplicate: unknown
    await h.store.transaction((tx) => (duplicate = kind.enqueueTx(tx as never, { n: 3 }, { uniqueKey: 'tx' })), 'commit')
    expect(await duplicate).toBe(id)
    expect(await kind.enqueueUnique({ n: 4 }, { uniqueKey: 'tx' })).toEqual({ id, created: false })
  })

  it('refuses a key that is not a non-empty string of at most 256 characters, and enqueueUnique without one, storing nothing', async () => {
    const web = h.runner()
    const kind = web.register(plan)
    for (const uniqueKey of ['', 'x'.repeat(257), 42, 'a\u0000b', null]) {
      await expect(kind.enqueue({ n: 1 }, { uniqueKey: uniqueKey as string })).rejects.toBeInstanceOf(InvalidArgumentError)
    }
    await expect(kind.enqueueUnique({ n: 1 }, {} as never)).rejects.toBeInstanceOf(InvalidArgumentError)
    expect(await kind.enqueue({ n: 1 }, { uniqueKey: 'x'.repeat(256) })).toMatch(/^[0-9a-f-]{36}$/)
    expect(await stored(web)).toHaveLength(1)
  })
})
