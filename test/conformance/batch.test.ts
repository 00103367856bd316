import type { StandardSchemaV1 } from '@standard-schema/spec'
import { expect, it } from 'vitest'
import { defineKind, InvalidArgumentError, InvalidPayloadError, type JobSpec, type Runner, type UniqueEnqueue } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'

/** Far from the real time, so a due time read from Date.now() instead of the runner's clock shows. */
const T0 = 1_000_000
const HOUR = 3_600_000

const plan = defineKind('plan_week', { payload: echoPayload })
const mail = defineKind('send_mail', { payload: echoPayload, timeoutMs: 30_000, retry: { maxAttempts: 4 } })

/** `{ n: number }` with n >= 0, validated asynchronously; the answer for a payload waits for `gates.get(n)` when there is one. */
function asyncSchema(gates = new Map<number, Promise<void>>()): StandardSchemaV1<{ n: number }> {
  return {
    '~standard': {
      version: 1,
      vendor: 'test',
      validate: async (value) => {
        const n = (value as { n?: unknown }).n
        await gates.get(n as number)
        return typeof n === 'number' && n >= 0 ? { value: { n } } : { issues: [{ message: 'n must be >= 0', path: ['n'] }] }
      },
    },
  }
}

/** The error fn throws, or the promise it returns rejects with; undefined when it succeeds. */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return undefined
}

/**
 * Calls fn inside a user's transaction, keeping what it throws (SQLite's
 * synchronous enqueues) or rejects with (PostgreSQL's); returns the promise
 * for the transaction to await before it commits, where there is one.
 */
function keeping(fn: () => unknown, keep: (err: unknown) => void): unknown {
  try {
    const result = fn()
    return result instanceof Promise ? result.then(() => undefined, keep) : undefined
  } catch (err) {
    keep(err)
    return undefined
  }
}

/** How many jobs the store holds, every status and scope, read through the runner's list. */
async function count(runner: Runner): Promise<number> {
  let n = 0
  let cursor: string | undefined
  do {
    const page = await runner.list({ limit: 1000, ...(cursor === undefined ? {} : { cursor }) })
    n += page.jobs.length
    cursor = page.nextCursor ?? undefined
  } while (cursor !== undefined)
  return n
}

describeEachBackend('batch enqueue', (backend) => {
  const h = harness(backend)

  /** A producer on the test clock with both kinds registered. */
  const setup = (options: Parameters<typeof h.runner>[0] = {}) => {
    const clock = { now: T0 }
    const runner = h.runner({ clock: () => clock.now, ...options })
    return { clock, runner, plans: runner.register(plan), mails: runner.register(mail) }
  }

  it('stores jobs of several kinds in one call, each with its own scope, priority, runAt, delayMs, timeoutMs and uniqueKey, answering per spec in order', async () => {
    const { runner, plans, mails } = setup()
    const results = await runner.enqueueMany([
      plans.job({ n: 0 }, { scope: 'h1', priority: 5 }),
      mails.job({ n: 1 }, { timeoutMs: 1_234 }),
      plans.job({ n: 2 }, { runAt: T0 + HOUR, priority: 2 }),
      mails.job({ n: 3 }, { delayMs: 2 * HOUR, scope: 'h2', priority: -3 }),
      plans.job({ n: 4 }, { uniqueKey: 'week-1', scope: 'h1' }),
      mails.job({ n: 5 }),
      plans.job({ n: 6 }, { runAt: new Date(T0 - 1), priority: 1 }),
    ])
    expect(results.map((r) => r.created)).toEqual([true, true, true, true, true, true, true])
    const ids = results.map((r) => r.id)
    expect(new Set(ids).size).toBe(7)
    const jobs = await Promise.all(ids.map((id) => runner.get(id)))
    expect(jobs.map((j) => [j.kind, j.status, j.priority, j.runAt, j.maxAttempts])).toEqual([
      ['plan_week', 'queued', 5, null, 1],
      ['send_mail', 'queued', 0, null, 4],
      ['plan_week', 'scheduled', 2, T0 + HOUR, 1],
      ['send_mail', 'scheduled', -3, T0 + 2 * HOUR, 4],
      ['plan_week', 'queued', 0, null, 1],
      ['send_mail', 'queued', 0, null, 4],
      ['plan_week', 'queued', 1, T0 - 1, 1],
    ])
    // Each job in its own scope.
    const inScope = async (scope: string | null) => (await runner.list({ scope })).jobs.map((j) => j.id).sort()
    expect(await inScope('h1')).toEqual([ids[0], ids[4]].sort())
    expect(await inScope('h2')).toEqual([ids[3]])
    expect(await inScope(null)).toEqual([ids[1], ids[2], ids[5], ids[6]].sort())
    // The key is held with its kind and scope.
    expect(await plans.enqueueUnique({ n: 7 }, { uniqueKey: 'week-1', scope: 'h1' })).toEqual({ id: ids[4], created: false })
    expect((await plans.enqueueUnique({ n: 8 }, { uniqueKey: 'week-1' })).created).toBe(true)
    // The claim takes the due jobs by their own priorities, then insertion order, each with its own deadline (or its kind's) and payload.
    const claimed = []
    for (let i = 0; i < 7; i++) claimed.push(...(await runner.driver.jobClaim({ limit: 1, runnerId: 'reader', kinds: ['plan_week', 'send_mail'], now: T0 })))
    expect(claimed.map((c) => [c.id, c.timeoutMs, JSON.parse(c.payload)])).toEqual([
      [ids[0], null, { n: 0 }],
      [ids[6], null, { n: 6 }],
      [ids[1], 1_234, { n: 1 }],
      [ids[4], null, { n: 4 }],
      [ids[5], 30_000, { n: 5 }],
      [expect.any(String), null, { n: 8 }],
    ])
  })

  it('a started runner runs the jobs of a batch by their own priorities', async () => {
    const clock = { now: T0 }
    const runner = h.runner({ workers: 1, clock: () => clock.now })
    const order: number[] = []
    const a = runner.register('a', { payload: echoPayload, handler: ({ n }) => void order.push(n) })
    const b = runner.register('b', { payload: echoPayload, handler: ({ n }) => void order.push(n) })
    const done = track(runner)
    const results = await runner.enqueueMany([a.job({ n: 1 }, { priority: 1 }), b.job({ n: 2 }, { priority: 9 }), a.job({ n: 3 }), b.job({ n: 4 }, { priority: 1 }), a.job({ n: 5 }, { priority: 9 })])
    await runner.start()
    await done.ends(results.map((r) => r.id))
    expect(order).toEqual([2, 5, 1, 4, 3])
  })

  it('unique keys: a spec whose key a live job holds gets that job; a second spec of one kind, scope and key gets the first one\'s id', async () => {
    const { runner, plans, mails } = setup()
    const live = await plans.enqueueUnique({ n: 0 }, { uniqueKey: 'held' })
    const results = await runner.enqueueMany([
      plans.job({ n: 1 }, { uniqueKey: 'held' }),
      plans.job({ n: 2 }, { uniqueKey: 'new' }),
      plans.job({ n: 3 }, { uniqueKey: 'new' }),
      plans.job({ n: 4 }, { uniqueKey: 'new', scope: 'h1' }),
      mails.job({ n: 5 }, { uniqueKey: 'new' }),
      plans.job({ n: 6 }, { uniqueKey: 'held', runAt: T0 + HOUR }),
      plans.job({ n: 7 }),
    ])
    const [held, first, second, scoped, otherKind, heldLater, plain] = results as [UniqueEnqueue, UniqueEnqueue, UniqueEnqueue, UniqueEnqueue, UniqueEnqueue, UniqueEnqueue, UniqueEnqueue]
    expect(held).toEqual({ id: live.id, created: false })
    expect(heldLater).toEqual({ id: live.id, created: false })
    expect(first.created).toBe(true)
    expect(second).toEqual({ id: first.id, created: false })
    expect([scoped.created, otherKind.created, plain.created]).toEqual([true, true, true])
    expect(new Set([live.id, first.id, scoped.id, otherKind.id, plain.id]).size).toBe(5)
    expect(await count(runner)).toBe(5)
    expect(JSON.parse((await runner.driver.jobClaim({ limit: 10, runnerId: 'reader', kinds: ['plan_week'], now: T0 }))[1]!.payload)).toEqual({ n: 2 })
  })

  it('a bad job at the end of a batch refuses the whole call, naming its index and never its payload, and stores nothing', async () => {
    const { runner, plans, mails } = setup()
    const other = h.runner().register(plan)
    const slow = runner.register(defineKind('slow_check', { payload: asyncSchema() }))
    const good = (): JobSpec[] => [plans.job({ n: 1 }, { uniqueKey: 'k', priority: 3 }), mails.job({ n: 2 }, { delayMs: HOUR }), slow.job({ n: 3 }, { scope: 'h1' })]
    const cases: [string, unknown, new (...args: never[]) => Error, string][] = [
      ['payload that does not fit', plans.job({ n: 'secret-9f3' } as never), InvalidPayloadError, 'at n'],
      ['payload an asynchronous schema refuses', slow.job({ n: -1 }), InvalidPayloadError, 'at n'],
      ['payload that is not JSON', mails.job({ n: 1n } as never), InvalidPayloadError, 'at (payload)'],
      ['unknown option', plans.job({ n: 1 }, { priorty: 1 } as never), InvalidArgumentError, '"priorty"'],
      ['priority out of range', plans.job({ n: 1 }, { priority: 1.5 }), InvalidArgumentError, 'priority'],
      ['runAt and delayMs', plans.job({ n: 1 }, { runAt: T0, delayMs: 1 }), InvalidArgumentError, 'not both'],
      ['options that are not an object', plans.job({ n: 1 }, 'secret-9f3' as never), InvalidArgumentError, 'must be an object'],
      ['bad uniqueKey', plans.job({ n: 1 }, { uniqueKey: '' }), InvalidArgumentError, 'uniqueKey'],
      ['payload instead of a spec', { n: 1 }, InvalidArgumentError, 'kind.job'],
      ['null', null, InvalidArgumentError, 'kind.job'],
      ['spec of another runner', other.job({ n: 1 }), InvalidArgumentError, 'another runner'],
    ]
    for (const [what, bad, type, says] of cases) {
      const err = await thrown(() => runner.enqueueMany([...good(), bad as JobSpec]))
      expect(err, what).toBeInstanceOf(type)
      expect((err as Error).message, what).toContain('enqueueMany: job 3: ')
      expect((err as Error).message, what).toContain(says)
      expect((err as Error).message, what).not.toContain('secret')
      expect(await count(runner), what).toBe(0)
    }
    expect(await thrown(() => runner.enqueueMany([plans.job({ n: 1 }), , plans.job({ n: 2 })] as JobSpec[]))).toMatchObject({ message: expect.stringContaining('job 1: ') })
    // Nothing of the good jobs was stored: their key is free.
    expect((await plans.enqueueUnique({ n: 1 }, { uniqueKey: 'k' })).created).toBe(true)
    expect(await count(runner)).toBe(1)
  })

  it('refuses a batch that is not an array; an empty one resolves to [] without a write', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const { runner, plans } = setup({ driver: faulty.driver })
    for (const specs of [undefined, null, plans.job({ n: 1 }), 'specs', { length: 1, 0: plans.job({ n: 1 }) }]) {
      const err = await thrown(() => runner.enqueueMany(specs as never))
      expect(err, String(specs)).toBeInstanceOf(InvalidArgumentError)
      expect((err as Error).message).toContain('enqueueMany: specs must be an array')
    }
    expect(await runner.enqueueMany([])).toEqual([])
    expect(faulty.calls['jobInsertMany']).toBeUndefined()
    expect(await count(runner)).toBe(0)
  })

  it('reports the first bad job by index, whatever order asynchronous checks end in, and leaves no stray rejection', async () => {
    const stray: unknown[] = []
    const onStray = (reason: unknown): void => void stray.push(reason)
    process.on('unhandledRejection', onStray)
    try {
      const { runner, plans } = setup()
      let openFirst!: () => void
      let openThird!: () => void
      const gates = new Map<number, Promise<void>>([
        [-1, new Promise<void>((resolve) => (openFirst = resolve))],
        [-3, new Promise<void>((resolve) => (openThird = resolve))],
      ])
      const slow = runner.register(defineKind('slow_check', { payload: asyncSchema(gates) }))
      // Both refused; the later one's refusal comes first.
      const refused = thrown(() => runner.enqueueMany([plans.job({ n: 0 }), slow.job({ n: -1 }), slow.job({ n: 2 }), slow.job({ n: -3 })]))
      openThird()
      await new Promise((resolve) => setImmediate(resolve))
      openFirst()
      expect(await refused).toMatchObject({ code: 'invalid_payload', message: expect.stringContaining('enqueueMany: job 1: ') })
      // A synchronous refusal after an asynchronous one still pending: the earlier job is reported.
      const mixed = await thrown(() => runner.enqueueMany([slow.job({ n: 5 }), slow.job({ n: -4 }), plans.job({ n: 'x' } as never), slow.job({ n: -5 })]))
      expect(mixed).toMatchObject({ code: 'invalid_payload', message: expect.stringContaining('enqueueMany: job 1: ') })
      // Only the synchronous one bad: reported at once, the pending checks' answers awaited.
      const sync = await thrown(() => runner.enqueueMany([slow.job({ n: 5 }), plans.job({ n: 1 }, { priority: Number.NaN }), slow.job({ n: -5 })]))
      expect(sync).toMatchObject({ code: 'invalid_argument', message: expect.stringContaining('enqueueMany: job 1: priority') })
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(stray).toEqual([])
      expect(await count(runner)).toBe(0)
    } finally {
      process.off('unhandledRejection', onStray)
    }
  })

  it('kind.enqueueMany with shared options names the index of the first bad payload too, storing nothing', async () => {
    const { runner, plans } = setup()
    const slow = runner.register(defineKind('slow_check', { payload: asyncSchema() }))
    const errors = [
      await thrown(() => plans.enqueueMany([{ n: 1 }, { n: 2 }, { n: 'x' } as never])),
      await thrown(() => slow.enqueueMany([{ n: 1 }, { n: 2 }, { n: -1 }])),
      await thrown(() => slow.enqueueMany([{ n: 1 }, { n: -1 }, { n: 1n } as never])),
    ]
    expect(errors.map((e) => [(e as InvalidPayloadError).code, (e as Error).message.match(/job \d+/)?.[0]])).toEqual([
      ['invalid_payload', 'job 2'],
      ['invalid_payload', 'job 2'],
      ['invalid_payload', 'job 1'],
    ])
    expect(await count(runner)).toBe(0)
  })

  it('a batch of 10,000 jobs of two kinds, each with its own options, is one call, with unique keys among them or without', async () => {
    const { runner, plans, mails } = setup()
    // Without keys the drivers write plain multi-row inserts; with any key, the unique path.
    for (const [round, keyed] of [[0, false], [1, true]] as const) {
      const specs = Array.from({ length: 10_000 }, (_, n) =>
        (n % 2 === 0 ? plans : mails).job({ n }, { priority: n % 7, scope: `h${n % 3}`, ...(keyed && n % 10 === 0 ? { uniqueKey: `k${n}` } : {}), ...(n % 4 === 0 ? { delayMs: n } : {}) }),
      )
      const results = await runner.enqueueMany(specs)
      expect(results).toHaveLength(10_000)
      expect(results.every((r) => r.created)).toBe(true)
      expect(new Set(results.map((r) => r.id)).size).toBe(10_000)
      expect(await count(runner)).toBe(10_000 * (round + 1))
      for (const n of [0, 1, 4_999, 9_998, 9_999]) {
        expect(await runner.get(results[n]!.id, { scope: `h${n % 3}` })).toMatchObject({
          kind: n % 2 === 0 ? 'plan_week' : 'send_mail',
          priority: n % 7,
          runAt: n % 4 === 0 ? T0 + n : null,
        })
      }
    }
  })

  it('enqueueManyTx: the batch exists exactly when the caller\'s transaction commits, and wake() after the commit runs it', async () => {
    const runner = h.runner({ workers: 2 })
    const a = runner.register('a', { payload: echoPayload, handler: () => undefined })
    const b = runner.register('b', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    await runner.start()
    let pending: unknown
    // Returned so a backend whose enqueueManyTx is asynchronous (PostgreSQL) awaits it before COMMIT.
    await h.store.transaction((tx) => (pending = runner.enqueueManyTx(tx as never, [a.job({ n: 1 }, { uniqueKey: 'k' }), b.job({ n: 2 }, { priority: 4 })])), 'rollback')
    // Synchronous where the driver's transactions are.
    expect(Array.isArray(pending)).toBe(runner.driver.capabilities.txSync)
    const rolledBack = (await pending) as UniqueEnqueue[]
    expect(rolledBack.map((r) => r.created)).toEqual([true, true])
    expect(await count(runner)).toBe(0)

    await h.store.transaction((tx) => (pending = runner.enqueueManyTx(tx as never, [a.job({ n: 1 }, { uniqueKey: 'k' }), b.job({ n: 2 }, { priority: 4 }), a.job({ n: 3 }, { uniqueKey: 'k' })])), 'commit')
    const committed = (await pending) as UniqueEnqueue[]
    expect(committed.map((r) => r.created)).toEqual([true, true, false])
    expect(committed[2]!.id).toBe(committed[0]!.id)
    expect(await runner.get(committed[1]!.id)).toMatchObject({ kind: 'b', priority: 4 })
    runner.wake()
    await done.ends([committed[0]!.id, committed[1]!.id])
    expect(await count(runner)).toBe(2)
  })

  it('kind.enqueueManyTx: payloads with shared options, committed with the transaction or rolled back with it', async () => {
    const { runner, plans } = setup()
    let pending: unknown
    await h.store.transaction((tx) => (pending = plans.enqueueManyTx(tx as never, [{ n: 1 }, { n: 2 }], { scope: 'h1', priority: 2 })), 'rollback')
    expect(Array.isArray(pending)).toBe(runner.driver.capabilities.txSync)
    expect((await pending) as string[]).toHaveLength(2)
    expect(await count(runner)).toBe(0)
    await h.store.transaction((tx) => (pending = plans.enqueueManyTx(tx as never, [{ n: 1 }, { n: 2 }], { scope: 'h1', runAt: T0 + HOUR })), 'commit')
    const ids = (await pending) as string[]
    for (const id of ids) expect(await runner.get(id, { scope: 'h1' })).toMatchObject({ status: 'scheduled', runAt: T0 + HOUR })
    let empty: unknown
    await h.store.transaction((tx) => (empty = plans.enqueueManyTx(tx as never, [])), 'commit')
    expect(await empty).toEqual([])
    expect(await count(runner)).toBe(2)
  })

  it('a bad job refuses the whole transactional batch, naming its index; the transaction, committed, stores none of it', async () => {
    const { runner, plans, mails } = setup()
    const slow = runner.register(defineKind('slow_check', { payload: asyncSchema() }))
    const bad: [string, () => unknown, string][] = [
      ['bad payload', () => [plans.job({ n: 1 }), mails.job({ n: 'x' } as never)], 'enqueueManyTx: job 1: payload'],
      ['bad option', () => [plans.job({ n: 1 }), mails.job({ n: 1 }, { delayMs: -1 })], 'enqueueManyTx: job 1: delayMs'],
      ['not a spec', () => [plans.job({ n: 1 }), 42], 'enqueueManyTx: job 1: not a job'],
      ['not an array', () => plans.job({ n: 1 }), 'enqueueManyTx: specs must be an array'],
    ]
    for (const [what, specs, says] of bad) {
      let refused: unknown
      await h.store.transaction((tx) => keeping(() => runner.enqueueManyTx(tx as never, specs() as JobSpec[]), (err) => (refused = err)), 'commit')
      expect(refused, what).toBeInstanceOf(Error)
      expect((refused as Error).message, what).toContain(says)
      expect(await count(runner), what).toBe(0)
    }
    let shared: unknown
    await h.store.transaction((tx) => keeping(() => plans.enqueueManyTx(tx as never, [{ n: 1 }, { n: 'x' } as never]), (err) => (shared = err)), 'commit')
    expect(shared).toMatchObject({ code: 'invalid_payload', message: expect.stringContaining('enqueueManyTx: job 1: ') })
    // An asynchronous schema: a synchronous transaction cannot wait for it; an asynchronous one does.
    let withAsync: unknown
    await h.store.transaction((tx) => keeping(() => runner.enqueueManyTx(tx as never, [plans.job({ n: 1 }), slow.job({ n: 2 })]), (err) => (withAsync = err)), 'commit')
    if (runner.driver.capabilities.txSync) expect(withAsync).toMatchObject({ code: 'invalid_payload', message: expect.stringContaining('enqueueManyTx: job 1: ') })
    else expect(withAsync).toBeUndefined()
    expect(await count(runner)).toBe(runner.driver.capabilities.txSync ? 0 : 2)
  })
})
