import { expect, it } from 'vitest'
import { ConfigError, defineKind, InvalidArgumentError, JobFailure, JobNotFoundError, Runner, type Job } from 'jobtable'
import { PRUNE_BATCH } from '../../src/runner/maintenance/retention.js'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { aborted, gate, track, until } from '../support/wait.js'

const DAY = 86_400_000
/** Far from the real time: a prune that compared with another clock than the runner's would show. */
const T0 = Date.UTC(2030, 0, 1)

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled'])
const isTerminal = (job: Job) => TERMINAL.has(job.status)

/** Whether the job is still stored. */
async function exists(runner: Runner, id: string): Promise<boolean> {
  try {
    await runner.get(id)
    return true
  } catch (err) {
    if (err instanceof JobNotFoundError) return false
    throw err
  }
}

/** The ids among `ids` still stored. */
async function stored(runner: Runner, ids: readonly string[]): Promise<string[]> {
  const kept: string[] = []
  for (const id of ids) if (await exists(runner, id)) kept.push(id)
  return kept
}

/** Polls until fn returns true; for what only the database shows. */
async function eventually(fn: () => Promise<boolean> | boolean): Promise<void> {
  while (!(await fn())) await new Promise((resolve) => setTimeout(resolve, 5))
}

const echo = defineKind('echo', { payload: echoPayload, failures: ['declined'] })
const dies = defineKind('dies', { payload: echoPayload })
const held = defineKind('held', { payload: echoPayload })
const snoozer = defineKind('snoozer', { payload: echoPayload })
const orphan = defineKind('orphan', { payload: echoPayload })
const parked = defineKind('parked', { payload: echoPayload })

describeEachBackend('retention', (backend) => {
  const h = harness(backend)

  /** A clock the test moves; every runner of a test shares it. */
  function testClock(start = T0) {
    const clock = { now: start, read: () => clock.now }
    return clock
  }

  /** Runs jobs of `echo` to their end on a started runner (n 0 succeeds, 1 fails declined, 2 throws), returning their ids. */
  async function finished(runner: Runner, ns: readonly number[]): Promise<string[]> {
    const ids: string[] = []
    for (const n of ns) ids.push(await runner.enqueue('echo', { n }))
    for (const id of ids) await until(runner, id, isTerminal)
    return ids
  }

  it('every way a job ends starts its age: it is kept for the whole age after it finished, however long ago it was enqueued, then deleted', async () => {
    const clock = testClock()
    const finishedAt = T0 + 30 * DAY
    // A process that dies with a job running: its handler gives up as the runner stops, leaving the job for the next start to fail as interrupted.
    const dying = h.runner({ clock: clock.read, retention: false })
    dying.register(dies, async (_p, job) => aborted(job.signal).then(() => Promise.reject(new Error('stopped'))))
    const web = h.runner({ clock: clock.read, retention: false })
    for (const kind of [dies, echo, held, snoozer, orphan]) web.register(kind)
    const ids: Record<string, string> = {
      interrupted: await web.enqueue('dies', { n: 0 }),
      succeeded: await web.enqueue('echo', { n: 0 }),
      declined: await web.enqueue('echo', { n: 1 }),
      internal: await web.enqueue('echo', { n: 2 }),
      cancelledRunning: await web.enqueue('held', { n: 0 }),
      cancelledInSnooze: await web.enqueue('snoozer', { n: 0 }),
      unknownKind: await web.enqueue('orphan', { n: 0 }),
      cancelledQueued: await web.enqueue('echo', { n: 3 }),
      cancelledScheduled: await web.enqueue('echo', { n: 4 }, { delayMs: 365 * DAY }),
    }
    // Thirty days on, every one of them ends.
    clock.now = finishedAt
    expect(await web.cancel(ids.cancelledQueued!)).toBe('cancelled')
    expect(await web.cancel(ids.cancelledScheduled!)).toBe('cancelled')
    const dyingDone = track(dying)
    await dying.start()
    await dyingDone.starts(1)
    await dying.stop({ timeoutMs: 0 })
    expect((await web.get(ids.interrupted!)).status).toBe('running')

    // The worker's start fails the dead runner's job; its unknown-kind check (no grace) fails the orphan.
    const worker = h.runner({ clock: clock.read, workers: 4, retention: false, unknownKindGraceMs: 0, driver: h.store.driver({ sweepIntervalMs: 20 }) })
    worker.register(echo, ({ n }, job) => {
      if (n === 1) return job.fail('declined')
      if (n === 2) throw new Error('boom')
      return null
    })
    worker.register(held, async (_p, job) => void (await aborted(job.signal)))
    worker.register(snoozer, async (_p, job) => aborted(job.signal).then(() => job.snooze(60_000)))
    const starts = track(worker)
    await worker.start()
    // Their handlers have started (a job claimed for a worker not yet free is running in the database before that).
    await eventually(() => starts.started.includes(ids.cancelledRunning!) && starts.started.includes(ids.cancelledInSnooze!))
    starts.stop()
    expect(await worker.cancel(ids.cancelledRunning!)).toBe('requested')
    expect(await worker.cancel(ids.cancelledInSnooze!)).toBe('requested')
    const ended: Record<string, Job> = {}
    for (const [name, id] of Object.entries(ids)) ended[name] = await until(worker, id, isTerminal)
    expect(Object.fromEntries(Object.entries(ended).map(([name, j]) => [name, [j.status, j.error]]))).toEqual({
      interrupted: ['failed', 'interrupted by restart'],
      succeeded: ['succeeded', null],
      declined: ['failed', 'declined'],
      internal: ['failed', 'internal_error'],
      cancelledRunning: ['cancelled', null],
      cancelledInSnooze: ['cancelled', null],
      unknownKind: ['failed', 'unknown_kind'],
      cancelledQueued: ['cancelled', null],
      cancelledScheduled: ['cancelled', null],
    })

    // A runner that only prunes, with the default retention of 7 days.
    const pruner = h.runner({ clock: clock.read })
    const all = Object.values(ids)
    clock.now = finishedAt + 7 * DAY
    expect(await pruner.prune()).toBe(0)
    expect(await stored(pruner, all)).toEqual(all)
    clock.now = finishedAt + 7 * DAY + 1
    expect(await pruner.prune()).toBe(all.length)
    expect(await stored(pruner, all)).toEqual([])
    expect(await pruner.prune()).toBe(0)
  })

  it('never deletes a scheduled, queued or running job, however old, whatever the age asked', async () => {
    const clock = testClock()
    const hold = gate()
    const worker = h.runner({ clock: clock.read, retention: false })
    const heldKind = worker.register(held, () => hold.promise)
    const web = h.runner({ clock: clock.read, retention: false })
    const parkedKind = web.register(parked)
    const queued = await parkedKind.enqueue({ n: 1 })
    const scheduled = await parkedKind.enqueue({ n: 2 }, { delayMs: 20 * 365 * DAY })
    const running = await heldKind.enqueue({ n: 3 })
    await worker.start()
    await until(worker, running, (j) => j.status === 'running')

    clock.now = T0 + 10 * 365 * DAY
    const pruner = h.runner({ clock: clock.read })
    expect(await pruner.prune()).toBe(0)
    expect(await pruner.prune({ olderThanMs: 0 })).toBe(0)
    expect(await pruner.prune({ olderThanMs: 0, statuses: ['succeeded', 'failed', 'cancelled'], kinds: ['parked', 'held'] })).toBe(0)
    expect((await pruner.get(queued)).status).toBe('queued')
    expect((await pruner.get(scheduled)).status).toBe('scheduled')
    expect((await pruner.get(running)).status).toBe('running')

    // The same prune takes the job once it has finished (and the clock has moved past its finish).
    hold.open()
    await until(worker, running, isTerminal)
    clock.now += 1
    expect(await pruner.prune({ olderThanMs: 0 })).toBe(1)
    expect(await exists(pruner, running)).toBe(false)
    expect(await stored(pruner, [queued, scheduled])).toEqual([queued, scheduled])
  })

  it('ages per status and per kind: the kind first, then the status, then the runner-wide age; false keeps', async () => {
    const clock = testClock()
    const worker = h.runner({ clock: clock.read, retention: false })
    const kinds = ['plan', 'mail', 'audit'] as const
    for (const kind of kinds) {
      worker.register(kind, { payload: echoPayload, failures: ['declined'], handler: ({ n }, job) => (n === 1 ? job.fail('declined') : null) })
    }
    await worker.start()
    const jobs: Record<string, string> = {}
    for (const kind of kinds) {
      jobs[`${kind}/succeeded`] = await worker.enqueue(kind, { n: 0 })
      jobs[`${kind}/failed`] = await worker.enqueue(kind, { n: 1 })
      const later = await worker.enqueue(kind, { n: 2 }, { delayMs: DAY })
      await worker.cancel(later)
      jobs[`${kind}/cancelled`] = later
    }
    for (const id of Object.values(jobs)) await until(worker, id, isTerminal)
    for (const [name, id] of Object.entries(jobs)) expect((await worker.get(id)).status, name).toBe(name.split('/')[1])

    const pruner = h.runner({
      clock: clock.read,
      retention: {
        maxAgeMs: 7 * DAY,
        byStatus: { failed: 30 * DAY },
        // mail is registered nowhere in this process: its rule applies all the same.
        byKind: { mail: { maxAgeMs: DAY }, audit: { maxAgeMs: false, byStatus: { cancelled: 2 * DAY } } },
      },
    })
    let left = Object.keys(jobs)
    /** Prunes at T0 + at: exactly `expected` go. */
    const step = async (at: number, expected: string[]) => {
      clock.now = T0 + at
      expect(await pruner.prune(), `at ${at}`).toBe(expected.length)
      const now: string[] = []
      for (const name of left) if (await exists(pruner, jobs[name]!)) now.push(name)
      expect(left.filter((name) => !now.includes(name)).sort(), `at ${at}`).toEqual(expected.sort())
      left = now
    }
    await step(DAY, [])
    await step(DAY + 1, ['mail/succeeded', 'mail/failed', 'mail/cancelled'])
    await step(2 * DAY + 1, ['audit/cancelled'])
    await step(7 * DAY + 1, ['plan/succeeded', 'plan/cancelled'])
    await step(30 * DAY, [])
    await step(30 * DAY + 1, ['plan/failed'])
    await step(100 * 365 * DAY, [])
    expect(left).toEqual(['audit/succeeded', 'audit/failed'])
  })

  it('a started runner prunes at its start and then every interval, logging the count only; retention: false never prunes', async () => {
    const clock = testClock()
    const worker = h.runner({ clock: clock.read, retention: false })
    worker.register(echo, () => null)
    const offDriver = new FaultyDriver(h.store.driver())
    const off = h.runner({ clock: clock.read, retention: false, driver: offDriver.driver })
    off.register(echo, () => null)
    await worker.start()
    const old = await finished(worker, [0, 0, 0])

    clock.now = T0 + 2 * DAY
    // An interval of an hour: only the pass at start can delete them within this test.
    const logs = captureLogs()
    const onStart = h.runner({ clock: clock.read, logger: logs, retention: { maxAgeMs: DAY, intervalMs: 3_600_000 } })
    onStart.register(echo, () => null)
    await onStart.start()
    const deletions = () => logs.lines.filter((l) => l.message === 'deleted terminal jobs past their retention')
    await eventually(() => deletions().length > 0)
    expect(deletions()).toEqual([{ level: 'info', fields: { count: 3 }, message: 'deleted terminal jobs past their retention' }])
    expect(await stored(worker, old)).toEqual([])
    await onStart.stop()

    // Every interval: jobs that finish after the start, once old enough, go by the next pass.
    const periodic = h.runner({ clock: clock.read, retention: { maxAgeMs: DAY, intervalMs: 20 } })
    periodic.register(echo, () => null)
    await periodic.start()
    const later = await finished(worker, [0, 1])
    clock.now += DAY + 1
    await eventually(async () => (await stored(worker, later)).length === 0)

    // retention: false: neither its start nor its timer reads or deletes anything, and prune() needs options.
    await off.start()
    await off.stop()
    expect(offDriver.calls['kindsFinished'] ?? 0).toBe(0)
    expect(offDriver.calls['jobPrune'] ?? 0).toBe(0)
    await expect(off.prune()).rejects.toBeInstanceOf(InvalidArgumentError)
    // The same wrapper sees the calls of a runner that prunes.
    const onDriver = new FaultyDriver(h.store.driver())
    const on = h.runner({ clock: clock.read, driver: onDriver.driver })
    on.register(echo, () => null)
    await on.start()
    expect(onDriver.calls['kindsFinished']).toBe(1)
  })

  it(`deletes ${PRUNE_BATCH} jobs a statement at most, kind by kind, until a statement comes back short`, async () => {
    const worker = h.runner({ workers: 10, retention: false })
    const bulkKind = worker.register('bulk', { payload: echoPayload, handler: () => null })
    const echoKind = worker.register(echo, () => null)
    const done = track(worker)
    const ids: string[] = []
    for (let i = 0; i < PRUNE_BATCH * 2 + 500; i += 500) ids.push(...(await bulkKind.enqueueMany(Array.from({ length: 500 }, (_, n) => ({ n })))))
    ids.push(...(await echoKind.enqueueMany(Array.from({ length: 30 }, (_, n) => ({ n })))))
    await worker.start()
    await done.ends(ids)
    await worker.stop()
    done.stop()

    const faulty = new FaultyDriver(h.store.driver())
    const calls = faulty.record('jobPrune')
    const pruner = h.runner({ driver: faulty.driver, clock: () => Date.now() + 1 })
    expect(await pruner.prune({ olderThanMs: 0 })).toBe(ids.length)
    const seen = calls.map((c) => [(c.params as { kind: string }).kind, (c.params as { limit: number }).limit, c.result])
    expect(seen).toEqual([
      ['bulk', PRUNE_BATCH, PRUNE_BATCH],
      ['bulk', PRUNE_BATCH, PRUNE_BATCH],
      ['bulk', PRUNE_BATCH, 500],
      ['echo', PRUNE_BATCH, 30],
    ])
    expect(await stored(pruner, ids.slice(0, 5))).toEqual([])
  })

  it('stop() ends a pass under way after its current statement, and waits for it', async () => {
    const worker = h.runner({ workers: 10, retention: false })
    const kind = worker.register(echo, () => null)
    const done = track(worker)
    const ids = await kind.enqueueMany(Array.from({ length: PRUNE_BATCH + 500 }, (_, n) => ({ n })))
    await worker.start()
    await done.ends(ids)
    done.stop()
    await worker.stop()
    // The pass's first delete waits until stop() has begun stopping the maintenance: the runner
    // stops its wakes (onWake's unsubscribe), then at once its maintenance. A driver whose database
    // cannot push (SQLite) has no onWake: this one is given one that never calls, as the contract
    // allows, for its unsubscribe to mark that moment.
    const real = h.store.driver()
    const release = gate()
    const statements: number[] = []
    const driver = new Proxy(real, {
      get(target, prop) {
        const value = Reflect.get(target, prop) as unknown
        if (prop === 'onWake') {
          return (callback: never) => {
            const off = typeof value === 'function' ? (value as (c: never) => () => void).call(target, callback) : () => undefined
            return () => {
              off()
              setImmediate(() => release.open())
            }
          }
        }
        if (typeof value !== 'function') return value
        if (prop === 'jobPrune') {
          return async (params: never) => {
            await release.promise
            const n = (await (value as (p: never) => Promise<number>).call(target, params)) as number
            statements.push(n)
            return n
          }
        }
        return (value as (...a: unknown[]) => unknown).bind(target)
      },
    })
    const runner = h.runner({ driver, clock: () => Date.now() + 1, retention: { maxAgeMs: 0, intervalMs: 3_600_000 } })
    runner.register(echo, () => null)
    await runner.start()
    await runner.stop()
    expect(statements).toEqual([PRUNE_BATCH])
    // What the stopped pass left: the rest of the backlog.
    expect(await h.runner({ clock: () => Date.now() + 1 }).prune({ olderThanMs: 0 })).toBe(500)
  })

  it('prunes while a drain runs: every job starts once and ends once, and only terminal jobs vanish', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const prunes = faulty.record('jobPrune')
    const finishes = faulty.record('jobFinishMany')
    const finishesAndClaims = faulty.record('jobFinishManyAndClaim')
    const pruned = () => prunes.reduce((sum, c) => sum + ((c.result as number | undefined) ?? 0), 0)
    // Age 0 on the real clock: a job goes a millisecond after it ends, by a pass every 5 ms.
    const runner = h.runner({ driver: faulty.driver, workers: 4, retention: { maxAgeMs: 0, intervalMs: 5 } })
    const starts = new Map<string, number>()
    const jobs = 300
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async ({ n }, job) => {
        starts.set(job.id, (starts.get(job.id) ?? 0) + 1)
        // Half way, hold one job until the pruner has deleted some: the prune and the drain overlap.
        if (n === jobs / 2) await eventually(() => pruned() > 0)
        return null
      },
    })
    const done = track(runner)
    const ids = await kind.enqueueMany(Array.from({ length: jobs }, (_, n) => ({ n })))
    await runner.start()
    await done.ends(ids)
    done.stop()
    await eventually(async () => (await runner.list({ limit: 1 })).jobs.length === 0)
    await runner.stop()

    expect(ids.filter((id) => starts.get(id) !== 1)).toEqual([])
    expect(pruned()).toBe(jobs)
    // A job deleted while queued would never have started; one deleted while running would have had its final write refused.
    const applied = [...finishes.map((c) => c.result as boolean[]), ...finishesAndClaims.map((c) => (c.result as { applied: boolean[] }).applied)].flat()
    expect(applied).toHaveLength(jobs)
    expect(applied.every((a) => a)).toBe(true)
  })

  it('pruners of two processes at once delete each job once, and neither fails', async () => {
    const worker = h.runner({ workers: 10, retention: false })
    const kind = worker.register(echo, () => null)
    const done = track(worker)
    const ids = await kind.enqueueMany(Array.from({ length: PRUNE_BATCH + 700 }, (_, n) => ({ n })))
    await worker.start()
    await done.ends(ids)
    done.stop()
    const clock = () => Date.now() + 1
    const [a, b] = [h.runner({ clock, driver: h.store.driver() }), h.runner({ clock, driver: h.store.driver() })]
    const counts = await Promise.all([a!.prune({ olderThanMs: 0 }), b!.prune({ olderThanMs: 0 }), a!.prune({ olderThanMs: 0, kinds: ['echo'] })])
    expect(counts.reduce((x, y) => x + y, 0)).toBe(ids.length)
    expect((await worker.list({ limit: 1 })).jobs).toEqual([])
  })

  it('refuses a bad retention or prune argument, naming the key, and deletes nothing', async () => {
    const clock = testClock()
    const worker = h.runner({ clock: clock.read, retention: false })
    worker.register(echo, () => null)
    await worker.start()
    const [id] = await finished(worker, [0])
    clock.now += 365 * DAY
    const driver = h.store.driver()
    const bad: [unknown, RegExp][] = [
      [{ maxAge: DAY }, /retention: unknown option "maxAge"/],
      [{ maxAgeMs: -1 }, /retention\.maxAgeMs must be an integer >= 0 \(milliseconds\) or false/],
      [{ maxAgeMs: 1.5 }, /retention\.maxAgeMs/],
      [{ maxAgeMs: Number.POSITIVE_INFINITY }, /retention\.maxAgeMs/],
      [{ maxAgeMs: '7d' }, /retention\.maxAgeMs/],
      [{ maxAgeMs: true }, /retention\.maxAgeMs/],
      [{ byStatus: { queued: 0 } }, /retention\.byStatus: unknown option "queued" \(known: succeeded, failed, cancelled\)/],
      [{ byStatus: { failed: -5 } }, /retention\.byStatus\.failed must be/],
      [{ byStatus: [1] }, /retention\.byStatus must be an object/],
      [{ byKind: { mail: { maxAgeMS: DAY } } }, /retention\.byKind\["mail"\]: unknown option "maxAgeMS"/],
      [{ byKind: { mail: { byStatus: { running: 0 } } } }, /retention\.byKind\["mail"\]\.byStatus: unknown option "running"/],
      [{ byKind: { mail: { maxAgeMs: -1 } } }, /retention\.byKind\["mail"\]\.maxAgeMs must be/],
      [{ byKind: { mail: DAY } }, /retention\.byKind\["mail"\] must be an object/],
      [{ byKind: { '': {} } }, /retention\.byKind: a kind name must be 1 to 256 characters/],
      [{ byKind: [] }, /retention\.byKind must be an object/],
      [{ intervalMs: 0 }, /retention\.intervalMs must be an integer from 1 to 2147483647/],
      [{ intervalMs: 2 ** 31 }, /retention\.intervalMs/],
      [true, /retention: options must be an object/],
      [null, /retention: options must be an object/],
    ]
    for (const [retention, message] of bad) {
      let err: unknown
      try {
        new Runner({ driver, retention: retention as never })
      } catch (e) {
        err = e
      }
      expect(err, JSON.stringify(retention)).toBeInstanceOf(ConfigError)
      expect((err as Error).message, JSON.stringify(retention)).toMatch(message)
    }
    const pruner = h.runner({ clock: clock.read })
    const badPrunes: [unknown, RegExp][] = [
      [{}, /olderThanMs must be an integer >= 0/],
      [{ olderThanMs: -1 }, /olderThanMs must be/],
      [{ olderThanMs: 0.5 }, /olderThanMs must be/],
      [{ olderThanMs: 0, olderThan: 1 }, /prune: unknown option "olderThan"/],
      [{ olderThanMs: 0, statuses: ['queued'] }, /"queued" is not a terminal status/],
      [{ olderThanMs: 0, statuses: 'failed' }, /statuses must be a non-empty array/],
      [{ olderThanMs: 0, statuses: [] }, /statuses must be a non-empty array/],
      [{ olderThanMs: 0, kinds: [] }, /kinds must be a non-empty array/],
      [{ olderThanMs: 0, kinds: [7] }, /kinds: each must be a string/],
      [null, /prune: options must be an object/],
      [[], /prune: options must be an object/],
    ]
    for (const [options, message] of badPrunes) {
      const err = await pruner.prune(options as never).then(() => undefined, (e: unknown) => e)
      expect(err, JSON.stringify(options)).toBeInstanceOf(InvalidArgumentError)
      expect((err as Error).message, JSON.stringify(options)).toMatch(message)
    }
    expect(await exists(pruner, id!)).toBe(true)
    // Every key accepted, and the job goes.
    const full = h.runner({ clock: clock.read, retention: { maxAgeMs: DAY, byStatus: { failed: false }, byKind: { x: { maxAgeMs: false, byStatus: { cancelled: 0 } } }, intervalMs: 1_000 } })
    expect(await full.prune()).toBe(1)
  })
})
