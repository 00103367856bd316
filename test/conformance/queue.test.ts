import { expect, it } from 'vitest'
import { JobNotFoundError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'

describeEachBackend('the table is the queue', (backend) => {
  const h = harness(backend)

  it('claims jobs oldest first by insertion order, even when the clock runs backwards', async () => {
    let now = 1_000_000
    const runner = h.runner({ workers: 1, clock: () => now-- })
    const started: number[] = []
    const kind = runner.register('echo', { payload: echoPayload, handler: ({ n }) => void started.push(n) })
    const ids: string[] = []
    for (let n = 0; n < 30; n++) ids.push(await kind.enqueue({ n }))
    const done = track(runner)
    await runner.start()
    await done.ends(ids)
    expect(started).toEqual([...Array(30).keys()])
  })

  it('claims the jobs of one enqueueMany in the order of its array, however many it holds', async () => {
    const runner = h.runner({ workers: 1 })
    const started: number[] = []
    const kind = runner.register('echo', { payload: echoPayload, handler: ({ n }) => void started.push(n) })
    // 123 crosses every chunk boundary a driver may split a batch at (SQLite: 50 rows a statement).
    const order = Array.from({ length: 123 }, (_, i) => (i * 37) % 123)
    const ids = await kind.enqueueMany(order.map((n) => ({ n })))
    const done = track(runner)
    await runner.start()
    await done.ends(ids)
    expect(started).toEqual(order)
  })

  it('runs every job exactly once across a pool of workers (ledger keyed by id)', async () => {
    const runner = h.runner({ workers: 5 })
    const ledger = new Map<string, number>()
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async (_p, job) => {
        ledger.set(job.id, (ledger.get(job.id) ?? 0) + 1)
        await new Promise((r) => setImmediate(r))
      },
    })
    const done = track(runner)
    await runner.start()
    const ids = await Promise.all(Array.from({ length: 500 }, (_, n) => kind.enqueue({ n })))
    await done.ends(ids)
    expect(ledger.size).toBe(500)
    for (const id of ids) expect(ledger.get(id)).toBe(1)
    for (const id of ids) expect((await runner.get(id)).status).toBe('succeeded')
  })

  it('runs at most N handlers at once, and N of them when N jobs wait', async () => {
    const runner = h.runner({ workers: 3 })
    const release = gate()
    let running = 0
    let most = 0
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async () => {
        most = Math.max(most, ++running)
        await release.promise
        running--
      },
    })
    const done = track(runner)
    const ids = await kind.enqueueMany([0, 1, 2, 3, 4, 5].map((n) => ({ n })))
    await runner.start()
    await done.starts(3)
    // Give a fourth worker every chance to appear: another enqueue and wake, and a read round trip.
    ids.push(await kind.enqueue({ n: 6 }))
    await runner.get(ids[0]!)
    await new Promise((r) => setImmediate(r))
    expect(running).toBe(3)
    release.open()
    await done.ends(ids)
    expect(most).toBe(3)
  })

  it('never holds more jobs running than it has workers while producers enqueue and final writes claim', async () => {
    const workers = 3
    const runner = h.runner({ workers })
    let most = 0
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async () => {
        // A job claimed for a worker that is not free yet would be running here with no handler.
        const { jobs } = await runner.list({ status: 'running', limit: 1000 })
        most = Math.max(most, jobs.length)
        await new Promise((r) => setImmediate(r))
      },
    })
    const done = track(runner)
    await runner.start()
    const ids: string[] = []
    let next = 0
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < 300) ids.push(await kind.enqueue({ n: next++ }))
      }),
    )
    await done.ends(ids)
    expect(most).toBeGreaterThanOrEqual(2)
    expect(most).toBeLessThanOrEqual(workers)
  })

  it('lets the event loop turn while it drains a backlog of handlers that return at once: a timer set at the start fires before the drain ends', async () => {
    const runner = h.runner({ workers: 10 })
    const kind = runner.register('noop', { payload: echoPayload, handler: () => null })
    const total = 5_000
    const ids: string[] = []
    for (let i = 0; i < total; i += 1_000) ids.push(...(await kind.enqueueMany(Array.from({ length: 1_000 }, (_, j) => ({ n: i + j })))))
    const done = track(runner)
    let endedWhenTimerFired = -1
    const fired = new Promise<void>((resolve) =>
      setTimeout(() => {
        endedWhenTimerFired = done.ended.size
        resolve()
      }, 0),
    )
    await runner.start()
    await fired
    await done.ends(ids)
    // Before the fix, sync handlers over SQLite finished, wrote and claimed on microtasks alone: the timer waited for all of them.
    expect(endedWhenTimerFired).toBeLessThan(total)
  })

  it('runs a job enqueued before the process stopped once a new runner opens the store', async () => {
    const first = h.runner()
    const kind = first.register('echo', { payload: echoPayload, handler: () => 'ran' })
    const id = await kind.enqueue({ n: 1 })
    await first.close()

    const second = h.runner()
    second.register('echo', { payload: echoPayload, handler: () => 'ran', result: (r) => r })
    const done = track(second)
    await second.start()
    await done.ends([id])
    expect(await second.get(id)).toMatchObject({ id, kind: 'echo', status: 'succeeded', result: 'ran', error: null })
  })

  it('wakes an idle worker on enqueue: a job runs with no polling', async () => {
    const runner = h.runner({ workers: 1 })
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    await runner.start()
    // The runner is idle now; only the enqueue's wake can make it claim again.
    const seen = track(runner)
    for (let n = 0; n < 5; n++) {
      const id = await kind.enqueue({ n })
      await seen.starts(n + 1)
      expect(seen.started[n]).toBe(id)
    }
  })

  it('get returns exactly {id, kind, status, result, error, attempt, maxAttempts, priority, runAt}, and not_found for an unknown id', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const id = await kind.enqueue({ n: 1 })
    const job = await runner.get(id)
    expect(Object.keys(job).sort()).toEqual(['attempt', 'error', 'id', 'kind', 'maxAttempts', 'priority', 'result', 'runAt', 'status'])
    expect(job).toEqual({ id, kind: 'echo', status: 'queued', result: null, error: null, attempt: 0, priority: 0, runAt: null, maxAttempts: 1 })
    await expect(runner.get('00000000-0000-4000-8000-000000000000')).rejects.toBeInstanceOf(JobNotFoundError)
    await expect(runner.get("' OR 1=1 --")).rejects.toMatchObject({ code: 'not_found' })
  })

  it('lists newest first page by page within a scope; a cursor reveals nothing of other scopes', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const mine: string[] = []
    for (let n = 0; n < 7; n++) {
      mine.push(await kind.enqueue({ n }, { scope: 'household-a' }))
      await kind.enqueue({ n }, { scope: 'household-b' })
    }
    const seen: string[] = []
    let cursor: string | undefined
    do {
      const page = await runner.list({ scope: 'household-a', limit: 3, cursor })
      seen.push(...page.jobs.map((j) => j.id))
      cursor = page.nextCursor ?? undefined
      if (cursor) expect(Buffer.from(cursor, 'base64url').toString()).not.toMatch(/^\D*\d+$/) // not a row count
    } while (cursor)
    expect(seen).toEqual([...mine].reverse())
    const first = await runner.list({ scope: 'household-a', limit: 2 })
    // The same cursor in another scope reads as a cursor whose job does not exist (or was deleted): placed
    // by the time its id begins with, it lists the other scope's own jobs only, and tells nothing of the job.
    const cursorId = Buffer.from(first.nextCursor!, 'base64url').toString() // 'j' and a version-7 id, its first 48 bits the enqueue's millisecond
    const unknown = Buffer.from(cursorId.slice(0, 14) + '-7fff-bfff-ffffffffffff').toString('base64url')
    const foreign = (await runner.list({ scope: 'household-b', cursor: first.nextCursor! })).jobs
    expect(foreign.length).toBeGreaterThan(0)
    expect(foreign.every((j) => !mine.includes(j.id))).toBe(true)
    expect(foreign).toEqual((await runner.list({ scope: 'household-b', cursor: unknown })).jobs)
    await expect(runner.list({ cursor: 'not-a-cursor' })).rejects.toMatchObject({ code: 'invalid_cursor' })
  })

  it('makes URL-safe ids in time order with 74 random bits (UUID version 7)', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const before = Date.now()
    const ids = [...(await kind.enqueueMany(Array.from({ length: 200 }, (_, n) => ({ n })))), await kind.enqueue({ n: 200 })]
    const after = Date.now()
    expect(new Set(ids).size).toBe(201)
    for (const id of ids) {
      expect(encodeURIComponent(id)).toBe(id)
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      // The first 48 bits are the enqueue time in milliseconds.
      const time = parseInt(id.slice(0, 8) + id.slice(9, 13), 16)
      expect(time).toBeGreaterThanOrEqual(before)
      expect(time).toBeLessThanOrEqual(after)
    }
    // Nothing after the timestamp counts up: ids made within one millisecond are
    // not in order of making, as a counter (which would tell how many jobs others made) would put them.
    const byTime = new Map<string, string[]>()
    for (const id of ids) byTime.set(id.slice(0, 13), [...(byTime.get(id.slice(0, 13)) ?? []), id.slice(14)])
    const sameMs = [...byTime.values()].reduce((a, b) => (b.length > a.length ? b : a))
    expect(sameMs.length).toBeGreaterThanOrEqual(10)
    expect(sameMs).not.toEqual([...sameMs].sort())
  })
})
