import { expect, it } from 'vitest'
import { defineKind, InvalidArgumentError, type Job } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track, until } from '../support/wait.js'

/** Far from the real time, so a due time compared with Date.now() or the database's clock instead of the runner's clock shows. */
const T0 = 1_000_000
const HOUR = 3_600_000

/** The error fn throws, or the promise it returns rejects with; undefined when it succeeds. */
async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return undefined
}

describeEachBackend('scheduled jobs and priorities', (backend) => {
  const h = harness(backend)

  /** A runner on the test clock with one worker: `n` of each start is pushed to `order`, and `ledger` counts starts by job id. */
  const setup = (options: { hold?: Promise<void>; holdN?: number } = {}) => {
    const clock = { now: T0 }
    // No fallback poll within a test on either backend (the SQLite store's is an hour already): only
    // the runner's own knowledge of due times, and wake(), may promote a job here.
    const runner = h.runner({ workers: 1, clock: () => clock.now, driver: h.store.driver({ pollIntervalMs: 3_600_000 } as never) })
    const order: number[] = []
    const ledger = new Map<string, number>()
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async ({ n }, job) => {
        ledger.set(job.id, (ledger.get(job.id) ?? 0) + 1)
        order.push(n)
        if (options.hold !== undefined && n === options.holdN) await options.hold
      },
    })
    const done = track(runner)
    return { clock, runner, kind, order, ledger, done }
  }

  /**
   * Proves a job is not claimable now, without a clock: wakes the runner
   * many times, then runs a queued sentinel of the same priority enqueued
   * after it on the single worker. Claims take insertion order within a
   * priority, so a claimable job would have started before the sentinel.
   * The sentinel is due now, so its enqueue also makes the scheduler
   * promote whatever it finds due at this very clock reading.
   */
  const provenNotClaimable = async (s: ReturnType<typeof setup>, id: string, sentinelN: number) => {
    for (let i = 0; i < 20; i++) {
      s.runner.wake()
      await s.runner.get(id)
    }
    const sentinel = await s.kind.enqueue({ n: sentinelN }, { runAt: s.clock.now })
    await s.done.ends([sentinel])
    expect(s.done.started).not.toContain(id)
    expect(s.ledger.get(id)).toBeUndefined()
    expect((await s.runner.get(id)).status).toBe('scheduled')
  }

  it('runAt in the future: stored scheduled, not started while the clock is before it however often the runner wakes; once the clock passes it and the runner wakes, it runs once and succeeds', async () => {
    const s = setup()
    await s.runner.start()
    const runAt = T0 + HOUR
    const id = await s.kind.enqueue({ n: 1 }, { runAt })
    expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', runAt, attempt: 0 })
    await provenNotClaimable(s, id, 100)
    s.clock.now = T0 + HOUR - 1
    await provenNotClaimable(s, id, 101)

    s.clock.now = T0 + HOUR + 1
    s.runner.wake()
    await s.done.ends([id])
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', error: null, attempt: 1, runAt })
    // More wakes and a job after it: still one start.
    for (let i = 0; i < 5; i++) s.runner.wake()
    await s.done.ends([await s.kind.enqueue({ n: 102 })])
    expect(s.ledger.get(id)).toBe(1)
    expect(s.order).toEqual([100, 101, 1, 102])
  })

  it('runAt as a Date: the same, and due exactly when the clock reaches it', async () => {
    const s = setup()
    await s.runner.start()
    const runAt = new Date(T0 + HOUR)
    const id = await s.kind.enqueue({ n: 1 }, { runAt })
    expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', runAt: T0 + HOUR })
    await provenNotClaimable(s, id, 100)
    s.clock.now = T0 + HOUR
    s.runner.wake()
    await s.done.ends([id])
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 1 })
    expect(s.ledger.get(id)).toBe(1)
  })

  it('delayMs: due delayMs after the runner clock at enqueue; scheduled until then, and runs once the clock reaches it', async () => {
    const s = setup()
    await s.runner.start()
    const id = await s.kind.enqueue({ n: 1 }, { delayMs: 60_000 })
    // Measured from the runner's clock, not Date.now().
    expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', runAt: T0 + 60_000, attempt: 0 })
    await provenNotClaimable(s, id, 100)
    s.clock.now = T0 + 59_999
    await provenNotClaimable(s, id, 101)
    s.clock.now = T0 + 60_000
    s.runner.wake()
    await s.done.ends([id])
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', error: null, attempt: 1, runAt: T0 + 60_000 })
    await s.done.ends([await s.kind.enqueue({ n: 102 })])
    expect(s.ledger.get(id)).toBe(1)
  })

  it('runAt now or in the past, and delayMs 0: stored queued with their due time, and run at once, with no wake and no clock change', async () => {
    const s = setup()
    const past = await s.kind.enqueue({ n: 1 }, { runAt: T0 - 1_000 })
    const now = await s.kind.enqueue({ n: 2 }, { runAt: new Date(T0) })
    const zero = await s.kind.enqueue({ n: 3 }, { delayMs: 0 })
    expect(await s.runner.get(past)).toMatchObject({ status: 'queued', runAt: T0 - 1_000 })
    expect(await s.runner.get(now)).toMatchObject({ status: 'queued', runAt: T0 })
    expect(await s.runner.get(zero)).toMatchObject({ status: 'queued', runAt: T0 })
    await s.runner.start()
    await s.done.ends([past, now, zero])
    expect(s.order).toEqual([1, 2, 3])
    // And on a started, idle runner: the enqueue's own wake runs it.
    const later = await s.kind.enqueue({ n: 4 }, { runAt: T0 - 5 })
    await s.done.ends([later])
    for (const id of [past, now, zero, later]) expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 1 })
  })

  it('claims the highest priority first, then insertion order: 0, 5, -1, 5, 10 start as 10, 5 (first), 5 (second), 0, -1', async () => {
    const s = setup()
    const priorities = [0, 5, -1, 5, 10]
    const ids: string[] = []
    for (const [n, priority] of priorities.entries()) ids.push(await s.kind.enqueue({ n }, { priority }))
    for (const [n, id] of ids.entries()) expect(await s.runner.get(id)).toMatchObject({ status: 'queued', priority: priorities[n], runAt: null })
    await s.runner.start()
    await s.done.ends(ids)
    expect(s.order).toEqual([4, 1, 3, 0, 2])
    expect(s.done.started).toEqual([ids[4], ids[1], ids[3], ids[0], ids[2]])
  })

  it('priorities at the ends of the 32-bit range are stored exactly and ordered', async () => {
    const s = setup()
    const priorities = [0, -2147483648, 2147483647, -1, 2147483646]
    const ids: string[] = []
    for (const [n, priority] of priorities.entries()) ids.push(await s.kind.enqueue({ n }, { priority }))
    for (const [n, id] of ids.entries()) expect((await s.runner.get(id)).priority).toBe(priorities[n])
    await s.runner.start()
    await s.done.ends(ids)
    expect(s.order).toEqual([2, 4, 0, 3, 1])
  })

  it('a scheduled job of priority 10, enqueued first and due later, is claimed once due before the lower-priority queued jobs still waiting', async () => {
    const hold = gate()
    const s = setup({ hold: hold.promise, holdN: 0 })
    await s.runner.start()
    // The single worker is held, so the waiting jobs' claim order shows once it is free.
    const blocker = await s.kind.enqueue({ n: 0 })
    await s.done.starts(1)
    const scheduled = await s.kind.enqueue({ n: 1 }, { runAt: T0 + HOUR, priority: 10 })
    const low = await s.kind.enqueue({ n: 2 })
    const high = await s.kind.enqueue({ n: 3 }, { priority: 5 })
    s.clock.now = T0 + HOUR
    s.runner.wake()
    await until(s.runner, scheduled, (j) => j.status === 'queued')
    hold.open()
    await s.done.ends([blocker, scheduled, low, high])
    expect(s.order).toEqual([0, 1, 3, 2])
  })

  it('a due scheduled job takes its place by priority, then insertion order, not by when it became due', async () => {
    const hold = gate()
    const s = setup({ hold: hold.promise, holdN: 0 })
    await s.runner.start()
    const blocker = await s.kind.enqueue({ n: 0 })
    await s.done.starts(1)
    const before = await s.kind.enqueue({ n: 1 }, { priority: 3 })
    const scheduled = await s.kind.enqueue({ n: 2 }, { runAt: T0 + HOUR, priority: 3 })
    const after = await s.kind.enqueue({ n: 3 }, { priority: 3 })
    const lower = await s.kind.enqueue({ n: 4 }, { priority: 2 })
    s.clock.now = T0 + HOUR
    s.runner.wake()
    await until(s.runner, scheduled, (j) => j.status === 'queued')
    hold.open()
    await s.done.ends([blocker, before, scheduled, after, lower])
    expect(s.order).toEqual([0, 1, 2, 3, 4])
  })

  it('two scheduled jobs of one priority due at different times run in insertion order once both are due', async () => {
    const hold = gate()
    const s = setup({ hold: hold.promise, holdN: 0 })
    await s.runner.start()
    const blocker = await s.kind.enqueue({ n: 0 })
    await s.done.starts(1)
    // The first enqueued is due later.
    const first = await s.kind.enqueue({ n: 1 }, { runAt: T0 + 2 * HOUR })
    const second = await s.kind.enqueue({ n: 2 }, { delayMs: HOUR })
    s.clock.now = T0 + 2 * HOUR
    s.runner.wake()
    await until(s.runner, first, (j) => j.status === 'queued')
    await until(s.runner, second, (j) => j.status === 'queued')
    hold.open()
    await s.done.ends([blocker, first, second])
    expect(s.order).toEqual([0, 1, 2])
  })

  it('the due scheduled jobs of a started runner are all promoted, the earliest first known or not, when enqueued before it started', async () => {
    const s = setup()
    const a = await s.kind.enqueue({ n: 1 }, { runAt: T0 + 2 * HOUR })
    const b = await s.kind.enqueue({ n: 2 }, { runAt: T0 + HOUR })
    // Another runner's enqueue, which this one never saw: only the database knows its due time.
    const other = h.runner({ clock: () => s.clock.now })
    const c = await other.register(defineKind('echo', { payload: echoPayload })).enqueue({ n: 3 }, { runAt: T0 + HOUR / 2 })
    await s.runner.start()
    await provenNotClaimable(s, a, 100)
    expect((await s.runner.get(b)).status).toBe('scheduled')
    expect((await s.runner.get(c)).status).toBe('scheduled')
    s.clock.now = T0 + HOUR
    s.runner.wake()
    await s.done.ends([b, c])
    expect((await s.runner.get(a)).status).toBe('scheduled')
    s.clock.now = T0 + 2 * HOUR
    s.runner.wake()
    await s.done.ends([a])
    expect(s.order).toEqual([100, 2, 3, 1])
    for (const id of [a, b, c]) expect(s.ledger.get(id)).toBe(1)
  })

  it('enqueueMany applies runAt and priority to each job; enqueueTx and runner.enqueue take the same options', async () => {
    const s = setup()
    const many = await s.kind.enqueueMany([{ n: 1 }, { n: 2 }], { runAt: T0 + HOUR, priority: 4 })
    let pending: unknown
    // Returned so a backend whose enqueueTx is asynchronous (PostgreSQL) awaits it before COMMIT.
    await h.store.transaction((tx) => (pending = s.kind.enqueueTx(tx as never, { n: 3 }, { delayMs: HOUR, priority: 6 })), 'commit')
    const tx = (await pending) as string
    const dynamic = await s.runner.enqueue('echo', { n: 4 }, { runAt: new Date(T0 + HOUR), priority: 5 })
    for (const id of many) expect(await s.runner.get(id)).toEqual({ id, kind: 'echo', status: 'scheduled', result: null, error: null, attempt: 0, priority: 4, runAt: T0 + HOUR, maxAttempts: 1 })
    expect(await s.runner.get(tx)).toEqual({ id: tx, kind: 'echo', status: 'scheduled', result: null, error: null, attempt: 0, priority: 6, runAt: T0 + HOUR, maxAttempts: 1 })
    expect(await s.runner.get(dynamic)).toEqual({ id: dynamic, kind: 'echo', status: 'scheduled', result: null, error: null, attempt: 0, priority: 5, runAt: T0 + HOUR, maxAttempts: 1 })
    await s.runner.start()
    await provenNotClaimable(s, many[0]!, 100)
    for (const id of [many[1]!, tx, dynamic]) expect((await s.runner.get(id)).status).toBe('scheduled')
    s.clock.now = T0 + HOUR
    s.runner.wake()
    await s.done.ends([...many, tx, dynamic])
    expect(s.order).toEqual([100, 3, 4, 1, 2])
    for (const id of [...many, tx, dynamic]) expect(s.ledger.get(id)).toBe(1)
  })

  it('enqueueTx of a scheduled job on a started runner: once the clock reaches its due time, wake() runs it', async () => {
    const s = setup()
    await s.runner.start()
    let pending: unknown
    await h.store.transaction((tx) => (pending = s.kind.enqueueTx(tx as never, { n: 1 }, { delayMs: HOUR })), 'commit')
    const id = (await pending) as string
    // Nothing else here makes the runner read the database: only what enqueueTx and wake() tell it.
    expect(await s.runner.get(id)).toMatchObject({ status: 'scheduled', runAt: T0 + HOUR })
    s.clock.now = T0 + HOUR
    s.runner.wake()
    await s.done.ends([id])
    expect(await s.runner.get(id)).toMatchObject({ status: 'succeeded', attempt: 1 })
    expect(s.ledger.get(id)).toBe(1)
  })

  it('enqueueMany, enqueueTx and runner.enqueue priorities order the claims of queued jobs', async () => {
    const s = setup()
    const plain = await s.kind.enqueue({ n: 0 })
    const many = await s.kind.enqueueMany([{ n: 1 }, { n: 2 }], { priority: 7 })
    let pending: unknown
    await h.store.transaction((tx) => (pending = s.kind.enqueueTx(tx as never, { n: 3 }, { priority: 9 })), 'commit')
    const tx = (await pending) as string
    const dynamic = await s.runner.enqueue('echo', { n: 4 }, { priority: -3 })
    const queuedMany = await s.kind.enqueueMany([{ n: 5 }], { priority: 8, runAt: T0 })
    for (const id of [plain, ...many, tx, dynamic, ...queuedMany]) expect((await s.runner.get(id)).status).toBe('queued')
    await s.runner.start()
    await s.done.ends([plain, ...many, tx, dynamic, ...queuedMany])
    expect(s.order).toEqual([3, 5, 1, 2, 0, 4])
  })

  it('reads a scheduled job as { id, kind, status, result, error, attempt, priority, runAt }, attempt 1 once it ran; list filters by status scheduled', async () => {
    const s = setup()
    const runAt = T0 + HOUR
    const id = await s.kind.enqueue({ n: 1 }, { runAt, priority: 3 })
    const queued = await s.kind.enqueue({ n: 2 })
    const later = await s.kind.enqueue({ n: 3 }, { delayMs: 2 * HOUR })
    const scheduledJob: Job = { id, kind: 'echo', status: 'scheduled', result: null, error: null, attempt: 0, priority: 3, runAt, maxAttempts: 1 }
    expect(await s.runner.get(id)).toEqual(scheduledJob)
    expect(await s.runner.get(queued)).toEqual({ id: queued, kind: 'echo', status: 'queued', result: null, error: null, attempt: 0, priority: 0, runAt: null, maxAttempts: 1 })
    const laterJob = { id: later, kind: 'echo', status: 'scheduled', result: null, error: null, attempt: 0, priority: 0, runAt: T0 + 2 * HOUR, maxAttempts: 1 }
    // Newest first.
    expect((await s.runner.list({ status: 'scheduled' })).jobs).toEqual([laterJob, scheduledJob])
    expect((await s.runner.list({ status: 'queued' })).jobs.map((j) => j.id)).toEqual([queued])
    expect((await s.runner.list()).jobs.map((j) => j.id)).toEqual([later, queued, id])

    await s.runner.start()
    await s.done.ends([queued])
    s.clock.now = runAt
    s.runner.wake()
    await s.done.ends([id])
    expect(await s.runner.get(id)).toEqual({ ...scheduledJob, status: 'succeeded', attempt: 1 })
    expect((await s.runner.list({ status: 'scheduled' })).jobs).toEqual([laterJob])
  })

  it('refuses bad scheduling options with InvalidArgumentError on every enqueue path, storing nothing', async () => {
    const s = setup()
    const bad: Record<string, unknown>[] = [
      { runAt: Number.NaN },
      { runAt: Number.POSITIVE_INFINITY },
      { runAt: new Date('not a date') },
      { runAt: '2030-01-01T00:00:00Z' },
      { runAt: T0 + HOUR, delayMs: 10 },
      { runAt: new Date(T0 + HOUR), delayMs: 0 },
      { delayMs: -1 },
      { delayMs: 1.5 },
      { delayMs: Number.NaN },
      { delayMs: Number.POSITIVE_INFINITY },
      { delayMs: '10' },
      { priority: 1.5 },
      { priority: '5' },
      { priority: Number.NaN },
      { priority: Number.POSITIVE_INFINITY },
      { priority: 2147483648 },
      { priority: -2147483649 },
    ]
    await s.runner.start()
    const paths: [string, (options: never) => unknown][] = [
      ['enqueue', (o) => s.kind.enqueue({ n: 1 }, o)],
      ['enqueueMany', (o) => s.kind.enqueueMany([{ n: 1 }, { n: 2 }], o)],
      ['runner.enqueue', (o) => s.runner.enqueue('echo', { n: 1 }, o)],
      ['enqueueTx', (o) => h.store.transaction((tx) => s.kind.enqueueTx(tx as never, { n: 1 }, o), 'commit')],
    ]
    for (const options of bad) {
      for (const [path, enqueue] of paths) {
        const err = await thrown(() => enqueue(options as never))
        const label = `${path} ${String(JSON.stringify(options, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v)))}`
        expect(err, label).toBeInstanceOf(InvalidArgumentError)
        expect((err as InvalidArgumentError).code, label).toBe('invalid_argument')
      }
    }
    expect((await s.runner.list()).jobs).toEqual([])
    expect(s.done.started).toEqual([])
  })
})

