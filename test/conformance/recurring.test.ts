import { expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, defineKind, InvalidPayloadError, type Job, jobEnqueueChannel, type JobEnqueueMessage, RunnerStateError, UnknownKindError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { until } from '../support/wait.js'

const MINUTE = 60_000
const HOUR = 60 * MINUTE
/** 2026-01-05 10:30 UTC, a Monday in winter: far from the real time, so a tick read from Date.now() shows. */
const T0 = Date.UTC(2026, 0, 5, 10, 30)

const digestPayload = z.strictObject({ list: z.string(), tick: z.string().optional() })
const digest = defineKind('send_digest', { payload: digestPayload })

describeEachBackend('recurring jobs', (backend) => {
  const h = harness(backend)

  /** A runner on the test clock `clock` with the digest kind (no handler: jobs stay queued where the test reads them). */
  const setup = (clock: { now: number }, driver = h.store.driver()) => {
    const runner = h.runner({ clock: () => clock.now, driver })
    const kind = runner.register(digest)
    return { runner, kind }
  }

  /** Every digest job, oldest tick first. */
  const jobs = async (runner: ReturnType<typeof setup>['runner']): Promise<Job[]> => {
    const page = await runner.list({ kind: 'send_digest', limit: 1000 })
    return page.jobs.sort((a, b) => (a.runAt ?? 0) - (b.runAt ?? 0))
  }

  it('a new schedule starts with its next tick: nothing for the ticks before it was first seen, then one job per tick, due at the tick, however often the runner looks', async () => {
    const clock = { now: T0 }
    const { runner } = setup(clock)
    runner.schedule('hourly-digest', digest.name, { cron: '0 * * * *', payload: { list: 'news' } })
    await runner.start()
    await runner.wake()
    expect(await jobs(runner)).toEqual([])
    clock.now = T0 + 30 * MINUTE - 1
    await runner.wake()
    expect(await jobs(runner)).toEqual([])
    clock.now = T0 + 30 * MINUTE
    for (let i = 0; i < 3; i++) await runner.wake()
    const first = await jobs(runner)
    expect(first.map((j) => [j.runAt, j.status])).toEqual([[Date.UTC(2026, 0, 5, 11), 'queued']])
    clock.now = T0 + 90 * MINUTE + 5
    await runner.wake()
    await runner.wake()
    expect((await jobs(runner)).map((j) => j.runAt)).toEqual([Date.UTC(2026, 0, 5, 11), Date.UTC(2026, 0, 5, 12)])
  })

  it("missed: 'last' (the default): after five hours with nothing running, the latest missed tick is enqueued once, not all five", async () => {
    const clock = { now: T0 }
    const before = setup(clock)
    before.runner.schedule('hourly-digest', digest, { cron: '0 * * * *', payload: { list: 'news' } })
    await before.runner.start()
    await before.runner.wake()
    await before.runner.close()
    clock.now = T0 + 5 * HOUR
    const after = setup(clock)
    after.runner.schedule('hourly-digest', digest, { cron: '0 * * * *', payload: { list: 'news' } })
    await after.runner.start()
    await after.runner.wake()
    await after.runner.wake()
    expect((await jobs(after.runner)).map((j) => j.runAt)).toEqual([Date.UTC(2026, 0, 5, 15)])
  })

  it("missed: 'skip': missed ticks are passed over, and the next tick on time is enqueued", async () => {
    const clock = { now: T0 }
    const before = setup(clock)
    before.runner.schedule('hourly-digest', digest, { cron: '0 * * * *', payload: { list: 'news' }, missed: 'skip' })
    await before.runner.start()
    await before.runner.wake()
    await before.runner.close()
    clock.now = T0 + 5 * HOUR
    const after = setup(clock)
    after.runner.schedule('hourly-digest', digest, { cron: '0 * * * *', payload: { list: 'news' }, missed: 'skip' })
    await after.runner.start()
    await after.runner.wake()
    expect(await jobs(after.runner)).toEqual([])
    // 16:00 found 30 s late: on time, within SKIP_LATE_MS.
    clock.now = Date.UTC(2026, 0, 5, 16, 0, 30)
    await after.runner.wake()
    expect((await jobs(after.runner)).map((j) => j.runAt)).toEqual([Date.UTC(2026, 0, 5, 16)])
  })

  it("missed: 'all': every missed tick is enqueued once, oldest first, past the catch-up bound of one pass", async () => {
    const clock = { now: T0 }
    const before = setup(clock)
    before.runner.schedule('minutely', digest, { cron: '* * * * *', payload: (tick) => ({ list: 'news', tick: tick.toISOString() }), missed: 'all' })
    await before.runner.start()
    await before.runner.wake()
    await before.runner.close()
    // 250 missed ticks: more than the 100 of one pass.
    clock.now = T0 + 250 * MINUTE
    const after = setup(clock)
    after.runner.schedule('minutely', digest, { cron: '* * * * *', payload: (tick) => ({ list: 'news', tick: tick.toISOString() }), missed: 'all' })
    await after.runner.start()
    await after.runner.wake()
    await after.runner.wake()
    const all = await jobs(after.runner)
    expect(all.map((j) => j.runAt)).toEqual(Array.from({ length: 250 }, (_, i) => T0 + (i + 1) * MINUTE))
  })

  it('two runners declaring one schedule (two processes) enqueue each tick exactly once between them', async () => {
    const clock = { now: T0 }
    const a = setup(clock)
    const b = setup(clock, h.store.driver())
    for (const r of [a.runner, b.runner]) r.schedule('minutely', digest, { cron: '* * * * *', payload: { list: 'news' } })
    await Promise.all([a.runner.start(), b.runner.start()])
    for (let i = 1; i <= 30; i++) {
      clock.now = T0 + i * MINUTE
      await Promise.all([a.runner.wake(), b.runner.wake(), a.runner.wake(), b.runner.wake()])
    }
    const ticks = (await jobs(a.runner)).map((j) => j.runAt)
    expect(ticks).toEqual(Array.from({ length: 30 }, (_, i) => T0 + (i + 1) * MINUTE))
  })

  it("reads its cron in the schedule's time zone: 03:00 in Paris is 02:00 UTC in winter and 01:00 UTC in summer", async () => {
    const clock = { now: Date.UTC(2026, 0, 5, 1, 59) }
    const { runner } = setup(clock)
    runner.schedule('paris-night', digest, { cron: '0 3 * * *', timezone: 'Europe/Paris', payload: { list: 'news' } })
    await runner.start()
    await runner.wake()
    clock.now = Date.UTC(2026, 0, 5, 2, 0)
    await runner.wake()
    clock.now = Date.UTC(2026, 6, 6, 1, 0)
    await runner.wake()
    expect((await jobs(runner)).map((j) => new Date(j.runAt!).toISOString())).toEqual(['2026-01-05T02:00:00.000Z', '2026-07-06T01:00:00.000Z'])
  })

  it("each tick's job has the payload its function makes of the tick, and the schedule's scope and priority", async () => {
    const clock = { now: T0 }
    const runner = h.runner({ clock: () => clock.now })
    const ran: unknown[] = []
    runner.register(digest, (payload) => void ran.push(payload))
    runner.schedule('hourly', digest, { cron: '0 * * * *', payload: (tick) => ({ list: 'news', tick: tick.toISOString() }), options: { scope: 'household-7', priority: 5 } })
    await runner.start()
    await runner.wake()
    clock.now = T0 + 30 * MINUTE
    await runner.wake()
    const [job] = (await runner.list({ scope: 'household-7' })).jobs
    expect(job?.priority).toBe(5)
    expect(job?.kind).toBe('send_digest')
    await until(runner, job!.id, (j) => j.status === 'succeeded')
    expect(ran).toEqual([{ list: 'news', tick: '2026-01-05T11:00:00.000Z' }])
  })

  it("a tick whose payload its kind refuses is logged by its code only and passed over; the schedule's next tick is enqueued", async () => {
    const clock = { now: T0 }
    const logger = captureLogs()
    const runner = h.runner({ clock: () => clock.now, logger })
    runner.register(digest)
    const marker = 'secret-marker-5f1c'
    let bad = true
    runner.schedule('hourly', digest, { cron: '0 * * * *', payload: () => (bad ? ({ list: 7, note: marker } as never) : { list: 'news' }) })
    await runner.start()
    await runner.wake()
    clock.now = T0 + 30 * MINUTE
    await runner.wake()
    expect(await jobs(runner)).toEqual([])
    expect(logger.lines.some((l) => l.message.includes('passed over') && l.fields.error === 'invalid_payload' && l.fields.schedule === 'hourly')).toBe(true)
    expect(logger.text()).not.toContain(marker)
    bad = false
    // Looked at again within the hour: the refused tick is not tried again.
    await runner.wake()
    expect(await jobs(runner)).toEqual([])
    clock.now = T0 + 90 * MINUTE
    await runner.wake()
    expect((await jobs(runner)).map((j) => j.runAt)).toEqual([Date.UTC(2026, 0, 5, 12)])
  })

  it("a tick whose uniqueKey a live job holds is consumed, as any enqueue with a held key: nothing stored, the schedule moved past it, not tried again once the key is free; the next tick is enqueued", async () => {
    const clock = { now: T0 }
    const { runner } = setup(clock)
    runner.schedule('hourly', digest, { cron: '0 * * * *', payload: { list: 'news' }, options: { uniqueKey: 'digest' } })
    await runner.start()
    await runner.wake()
    clock.now = T0 + 30 * MINUTE
    await runner.wake()
    const [first] = await jobs(runner)
    expect(first?.runAt).toBe(Date.UTC(2026, 0, 5, 11))
    // 12:00: the 11:00 job is still queued (no handler here) and holds the key.
    clock.now = T0 + 90 * MINUTE
    await runner.wake()
    expect((await jobs(runner)).map((j) => j.id)).toEqual([first!.id])
    expect(await runner.driver.schedulesRead({ names: ['hourly'] })).toEqual([{ name: 'hourly', lastTickAt: Date.UTC(2026, 0, 5, 12) }])
    // The key is free again within the hour: the 12:00 tick stays passed over.
    expect(await runner.cancel(first!.id)).toBe('cancelled')
    clock.now = T0 + 100 * MINUTE
    await runner.wake()
    expect((await jobs(runner)).map((j) => [j.runAt, j.status])).toEqual([[Date.UTC(2026, 0, 5, 11), 'cancelled']])
    clock.now = T0 + 150 * MINUTE
    await runner.wake()
    expect((await jobs(runner)).map((j) => [j.runAt, j.status])).toEqual([
      [Date.UTC(2026, 0, 5, 11), 'cancelled'],
      [Date.UTC(2026, 0, 5, 13), 'queued'],
    ])
  })

  it('a tick publishes jobtable:job:enqueue only for a job it stored: nothing for a tick whose uniqueKey a live job holds', async () => {
    const clock = { now: T0 }
    const { runner } = setup(clock)
    runner.schedule('hourly', digest, { cron: '0 * * * *', payload: { list: 'news' }, options: { uniqueKey: 'digest' } })
    const published: JobEnqueueMessage[] = []
    const listen = (message: unknown) => {
      if ((message as JobEnqueueMessage).runnerId === runner.id) published.push(message as JobEnqueueMessage)
    }
    jobEnqueueChannel.subscribe(listen)
    try {
      await runner.start()
      await runner.wake()
      // 11:00: the tick's job is stored, and published once.
      clock.now = T0 + 30 * MINUTE
      await runner.wake()
      expect((await jobs(runner)).map((j) => j.runAt)).toEqual([Date.UTC(2026, 0, 5, 11)])
      expect(published).toEqual([{ runnerId: runner.id, kind: 'send_digest', count: 1 }])
      // 12:00: the 11:00 job still holds the key; the schedule moves past the tick, and nothing is published.
      clock.now = T0 + 90 * MINUTE
      await runner.wake()
      expect(await runner.driver.schedulesRead({ names: ['hourly'] })).toEqual([{ name: 'hourly', lastTickAt: Date.UTC(2026, 0, 5, 12) }])
      expect((await jobs(runner)).map((j) => j.runAt)).toEqual([Date.UTC(2026, 0, 5, 11)])
      expect(published).toHaveLength(1)
    } finally {
      jobEnqueueChannel.unsubscribe(listen)
    }
  })

  it('a schedule removed from the code stops: a runner that no longer declares it enqueues none of its ticks', async () => {
    const clock = { now: T0 }
    const before = setup(clock)
    before.runner.schedule('kept', digest, { cron: '0 * * * *', payload: { list: 'kept' } })
    before.runner.schedule('removed', digest, { cron: '0 * * * *', payload: { list: 'removed' } })
    await before.runner.start()
    await before.runner.wake()
    await before.runner.close()
    clock.now = T0 + 30 * MINUTE
    const after = setup(clock)
    after.runner.schedule('kept', digest, { cron: '0 * * * *', payload: { list: 'kept' } })
    await after.runner.start()
    await after.runner.wake()
    const all = await jobs(after.runner)
    expect(all).toHaveLength(1)
    // Its tick is the kept schedule's; the removed one's row is left as it was, never moved on.
    expect(all[0]!.runAt).toBe(Date.UTC(2026, 0, 5, 11))
    const rows = await after.runner.driver.schedulesRead({ names: ['kept', 'removed'] })
    expect(new Map(rows.map((r) => [r.name, r.lastTickAt]))).toEqual(new Map([['kept', Date.UTC(2026, 0, 5, 11)], ['removed', Date.UTC(2026, 0, 5, 10)]]))
  })

  it('refuses a bad declaration with a clear error, before anything runs', async () => {
    const clock = { now: T0 }
    const { runner } = setup(clock)
    const ok = { cron: '0 * * * *', payload: { list: 'news' } }
    expect(() => runner.schedule('a', digest, { ...ok, tz: 'UTC' } as never)).toThrow(/unknown option "tz"/)
    expect(() => runner.schedule('a', digest, { ...ok, cron: '0 * * * * *' })).toThrow(ConfigError)
    expect(() => runner.schedule('a', digest, { ...ok, cron: '0 * * *' })).toThrow(ConfigError)
    expect(() => runner.schedule('a', digest, { ...ok, cron: '61 * * * *' })).toThrow(/minute/)
    expect(() => runner.schedule('a', digest, { ...ok, cron: 7 as never })).toThrow(ConfigError)
    expect(() => runner.schedule('a', digest, { ...ok, timezone: 'Mars/Olympus' })).toThrow(/time zone/)
    expect(() => runner.schedule('a', digest, { ...ok, missed: 'some' as never })).toThrow(/missed must be one of last, skip, all/)
    expect(() => runner.schedule('a', digest, { cron: '0 * * * *' } as never)).toThrow(/payload is required/)
    expect(() => runner.schedule('a', digest, { ...ok, options: { runAt: 5 } as never })).toThrow(/unknown option "runAt"/)
    expect(() => runner.schedule('a', digest, { ...ok, options: { priority: 1.5 } })).toThrow(ConfigError)
    expect(() => runner.schedule('', digest, ok)).toThrow(/schedule name/)
    expect(() => runner.schedule('a', 'no_such_kind', ok)).toThrow(UnknownKindError)
    expect(() => runner.schedule('a', digest, { ...ok, payload: { list: 3 } as never })).toThrow(InvalidPayloadError)
    runner.schedule('a', digest, ok)
    expect(() => runner.schedule('a', digest, ok)).toThrow(/already declared/)
    await runner.start()
    await runner.wake()
    expect(() => runner.schedule('b', digest, ok)).toThrow(RunnerStateError)
    // Nothing was recorded for the refused declarations.
    expect((await runner.driver.schedulesRead({ names: ['a', 'b', ''] })).map((r) => r.name)).toEqual(['a'])
  })

  it("a payload that an asynchronous schema refuses makes start() reject, and nothing starts", async () => {
    const clock = { now: T0 }
    const runner = h.runner({ clock: () => clock.now })
    const asyncKind = runner.register('async_digest', {
      payload: z.strictObject({ list: z.string() }).refine(async (v) => v.list !== 'refused'),
      handler: () => undefined,
    })
    runner.schedule('hourly', asyncKind, { cron: '0 * * * *', payload: { list: 'refused' } })
    await expect(runner.start()).rejects.toThrow(InvalidPayloadError)
    expect(await runner.driver.schedulesRead({ names: ['hourly'] })).toEqual([])
  })
})
