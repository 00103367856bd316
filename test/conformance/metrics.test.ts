import { expect, it } from 'vitest'
import { z } from 'zod'
import { claimErrorChannel, ConfigError, databaseErrorChannel, defineKind, JobFailure, jobEndChannel, jobEnqueueChannel, type Runner } from 'jobtable'
import { createMetrics, type Metrics } from 'jobtable/metrics'
import { Registry } from 'prom-client'
import { describeEachBackend } from '../support/backends.js'
import { endsOf } from '../support/attempts.js'
import { FaultyDriver, corrupt } from '../support/faults.js'
import { harness } from '../support/harness.js'
import { samplesOf } from '../support/prometheus.js'
import { aborted, gate, track } from '../support/wait.js'

/** Resolves once ok() holds, looking again every few milliseconds: for a state no event marks. */
async function until(ok: () => boolean): Promise<void> {
  while (!ok()) await new Promise((resolve) => setTimeout(resolve, 2))
}

/** Far from the real time, so a duration or wait taken from another clock than the runner's shows. */
const T0 = 1_000_000

/** What a handler does: return, fail with a declared code, throw, wait for its signal (a cancel or a deadline), or snooze once. */
const stepPayload = z.strictObject({ steps: z.array(z.enum(['ok', 'declared', 'throw', 'abort', 'snooze'])), note: z.string().optional() })
type Payload = z.infer<typeof stepPayload>

const plan = defineKind('plan_week', { payload: stepPayload, failures: ['provider_unavailable'] })
const mail = defineKind('send_mail', { payload: stepPayload })
const flaky = defineKind('flaky', {
  payload: stepPayload,
  failures: ['provider_unavailable'],
  // Retried at once (no backoff), so no clock needs moving between attempts.
  retry: { maxAttempts: 3, codes: ['provider_unavailable', 'timeout'], backoff: { baseMs: 0, maxMs: 0 } },
})

const steps = (...s: Payload['steps']): Payload => ({ steps: s })

/** Runs the step of `steps` for this attempt. */
async function act({ steps: s }: Payload, job: { attempt: number; signal: AbortSignal; snooze(ms: number): never }): Promise<{ ok: true }> {
  switch (s[job.attempt - 1] ?? 'ok') {
    case 'declared':
      throw new JobFailure<string>('provider_unavailable')
    case 'throw':
      throw new Error('provider said: sk-secret is invalid')
    case 'abort':
      await aborted(job.signal)
      return { ok: true }
    case 'snooze':
      return job.snooze(0)
    default:
      return { ok: true }
  }
}

describeEachBackend('metrics', (backend) => {
  const h = harness(backend)
  const opened: Metrics[] = []
  const metricsOf = (runner: Runner, options: { queueDepthLimit?: number; registry?: Registry } = {}) => {
    const m = createMetrics({ runner, ...options })
    opened.push(m)
    return { registry: m.registry, scrape: async () => samplesOf(await m.registry.metrics()) }
  }
  // After each test, before the harness closes the runners: a metrics object left subscribed would count the next test's jobs.
  const closeAll = () => {
    for (const m of opened.splice(0)) m.close()
  }

  it('counts enqueued, started and finished jobs by exactly the number of each per kind, status and code, and only its own runner’s', async () => {
    try {
      const runner = h.runner({ workers: 4 })
      const plans = runner.register(plan, act)
      const mails = runner.register(mail, act)
      // A producer on the same database in this process: its enqueues are its own, the jobs it enqueues run (and count) on the worker.
      const web = h.runner({ driver: h.store.driver() })
      const webPlans = web.register(plan)
      const ours = metricsOf(runner)
      const theirs = metricsOf(web)

      const ids = await plans.enqueueMany([steps('ok'), steps('ok'), steps('ok'), steps('declared'), steps('declared'), steps('throw')])
      ids.push(await plans.enqueue(steps('ok')))
      ids.push((await plans.enqueueUnique(steps('ok'), { uniqueKey: 'week-1' })).id)
      // A live job holds the key: nothing stored, nothing counted.
      expect((await plans.enqueueUnique(steps('ok'), { uniqueKey: 'week-1' })).created).toBe(false)
      // Every payload shares the key: the first is stored.
      ids.push(...new Set(await plans.enqueueMany([steps('ok'), steps('ok'), steps('ok')], { uniqueKey: 'week-2' })))
      ids.push(...(await mails.enqueueMany([steps('ok'), steps('declared')])))
      // Through the application's own transaction, counted when it inserts.
      await h.store.transaction(async (tx) => void ids.push(await mails.enqueueTx(tx as never, steps('ok'))), 'commit')
      ids.push(...(await webPlans.enqueueMany([steps('ok'), steps('ok')])))
      // Cancelled before any start: enqueued, never started, never finished.
      const early = await plans.enqueue(steps('ok'))
      expect(await runner.cancel(early)).toBe('cancelled')

      const done = track(runner)
      await runner.start()
      await done.ends(ids)
      // One more, cancelled while its handler runs.
      const held = await plans.enqueue(steps('abort'))
      await done.starts(ids.length + 1)
      expect(await runner.cancel(held)).toBe('requested')
      await done.ends([held])

      const m = await ours.scrape()
      expect(m.value('jobtable_jobs_enqueued_total', { kind: 'plan_week' })).toBe(6 + 1 + 1 + 1 + 1 + 1)
      expect(m.value('jobtable_jobs_enqueued_total', { kind: 'send_mail' })).toBe(3)
      expect(m.value('jobtable_jobs_started_total', { kind: 'plan_week' })).toBe(6 + 1 + 1 + 1 + 2 + 1)
      expect(m.value('jobtable_jobs_started_total', { kind: 'send_mail' })).toBe(3)
      const finished = (labels: Record<string, string>) => m.value('jobtable_jobs_finished_total', labels)
      expect(finished({ kind: 'plan_week', status: 'succeeded' })).toBe(3 + 1 + 1 + 1 + 2)
      expect(finished({ kind: 'plan_week', status: 'failed', code: 'provider_unavailable' })).toBe(2)
      expect(finished({ kind: 'plan_week', status: 'failed', code: 'internal_error' })).toBe(1)
      expect(finished({ kind: 'plan_week', status: 'cancelled' })).toBe(1)
      expect(finished({ kind: 'send_mail', status: 'succeeded' })).toBe(2)
      // send_mail declares no code: its JobFailure is an internal_error.
      expect(finished({ kind: 'send_mail', status: 'failed', code: 'internal_error' })).toBe(1)
      expect(m.all('jobtable_jobs_finished_total').reduce((sum, s) => sum + s.value, 0)).toBe(ids.length + 1)
      expect(m.value('jobtable_job_run_duration_seconds_count', { kind: 'plan_week' })).toBe(12)
      expect(m.value('jobtable_job_queue_wait_seconds_count', { kind: 'send_mail' })).toBe(3)

      const t = await theirs.scrape()
      expect(t.value('jobtable_jobs_enqueued_total', { kind: 'plan_week' })).toBe(2)
      expect(t.all('jobtable_jobs_started_total')).toEqual([])
      expect(t.all('jobtable_jobs_finished_total')).toEqual([])
    } finally {
      closeAll()
    }
  })

  it('counts the jobs its recurring schedules enqueue, one per tick stored', async () => {
    try {
      const MINUTE = 60_000
      const start = Date.UTC(2026, 0, 5, 10, 30)
      const clock = { now: start }
      const runner = h.runner({ clock: () => clock.now })
      // No handler: the ticks' jobs stay queued.
      runner.register(mail)
      runner.schedule('hourly-mail', mail.name, { cron: '0 * * * *', payload: steps('ok') })
      const metrics = metricsOf(runner)
      await runner.start()
      await runner.wake()
      clock.now = start + 30 * MINUTE
      for (let i = 0; i < 3; i++) await runner.wake()
      clock.now = start + 90 * MINUTE
      await runner.wake()
      expect((await runner.list({ kind: 'send_mail' })).jobs).toHaveLength(2)
      const m = await metrics.scrape()
      expect(m.value('jobtable_jobs_enqueued_total', { kind: 'send_mail' })).toBe(2)
      expect(m.value('jobtable_queue_depth', { kind: 'send_mail', status: 'queued' })).toBe(2)
    } finally {
      closeAll()
    }
  })

  it('counts retries, snoozes and timeouts, each attempt once, with the code behind each', async () => {
    try {
      const runner = h.runner({ workers: 2 })
      const flakies = runner.register(flaky, act)
      const naps = runner.register('nap', { payload: stepPayload, handler: act })
      const metrics = metricsOf(runner)
      const ends = endsOf(runner)
      // Its deadline passes twice (a retry, then the last attempt's failure), with a declared failure between.
      const id = await flakies.enqueue(steps('abort', 'declared', 'abort'), { timeoutMs: 20 })
      const napping = await naps.enqueue(steps('snooze', 'ok'))
      await runner.start()
      await ends.nth(id, 3)
      await ends.nth(napping, 2)
      ends.stop()
      expect((await runner.get(id)).error).toBe('timeout')

      const m = await metrics.scrape()
      expect(m.value('jobtable_jobs_started_total', { kind: 'flaky' })).toBe(3)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'flaky', status: 'retry', code: 'timeout' })).toBe(1)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'flaky', status: 'retry', code: 'provider_unavailable' })).toBe(1)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'flaky', status: 'failed', code: 'timeout' })).toBe(1)
      expect(m.value('jobtable_retries_total', { kind: 'flaky' })).toBe(2)
      expect(m.value('jobtable_timeouts_total', { kind: 'flaky' })).toBe(2)
      expect(m.value('jobtable_job_run_duration_seconds_count', { kind: 'flaky' })).toBe(3)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'nap', status: 'snoozed' })).toBe(1)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'nap', status: 'succeeded' })).toBe(1)
      // A snooze is not a retry.
      expect(m.value('jobtable_retries_total', { kind: 'nap' })).toBeUndefined()
      expect(m.value('jobtable_jobs_started_total', { kind: 'nap' })).toBe(2)
    } finally {
      closeAll()
    }
  })

  it('observes each job once in the run duration and queue wait histograms, by the runner’s clock, waiting from a scheduled job’s due time', async () => {
    try {
      const clock = { now: T0 }
      const runner = h.runner({ workers: 5, clock: () => clock.now })
      const release = gate()
      const timed = runner.register('timed', {
        payload: z.strictObject({}),
        handler: async () => {
          await release.promise
        },
      })
      const metrics = metricsOf(runner)
      const ids = await timed.enqueueMany([{}, {}, {}])
      ids.push(await timed.enqueue({}, { runAt: T0 + 10_000 }))
      // Due before it was enqueued: claimable from its enqueue.
      ids.push(await timed.enqueue({}, { runAt: T0 - 5_000 }))
      clock.now = T0 + 30_000
      const done = track(runner)
      await runner.start()
      await done.starts(5)
      clock.now += 2_500
      release.open()
      await done.ends(ids)

      const m = await metrics.scrape()
      const wait = (suffix: string, labels: Record<string, string> = {}) => m.value(`jobtable_job_queue_wait_seconds_${suffix}`, { kind: 'timed', ...labels })
      expect(wait('count')).toBe(5)
      // Four waited 30 s from their enqueue, the scheduled one 20 s from its due time.
      expect(wait('sum')).toBe(4 * 30 + 20)
      expect(wait('bucket', { le: '10' })).toBe(0)
      expect(wait('bucket', { le: '30' })).toBe(5)
      const run = (suffix: string, labels: Record<string, string> = {}) => m.value(`jobtable_job_run_duration_seconds_${suffix}`, { kind: 'timed', ...labels })
      expect(run('count')).toBe(5)
      expect(run('sum')).toBe(5 * 2.5)
      expect(run('bucket', { le: '1' })).toBe(0)
      expect(run('bucket', { le: '2.5' })).toBe(5)
    } finally {
      closeAll()
    }
  })

  it('reports the queue depth per kind and status (scheduled across kinds) and the busy and idle workers while gated handlers run', async () => {
    try {
      const clock = { now: T0 }
      const runner = h.runner({ workers: 6, clock: () => clock.now })
      const release = gate()
      const slow = runner.register('slow', { payload: z.strictObject({}), handler: () => release.promise })
      // Registered without a handler: its jobs stay queued for a worker elsewhere.
      const elsewhere = runner.register(defineKind('elsewhere', { payload: z.strictObject({}) }))
      const metrics = metricsOf(runner)
      const capped = metricsOf(runner, { registry: new Registry(), queueDepthLimit: 1 })
      const ids = await slow.enqueueMany([{}, {}, {}, {}, {}])
      await elsewhere.enqueueMany([{}, {}])
      await slow.enqueueMany([{}, {}], { runAt: T0 + 3_600_000 })

      let m = await metrics.scrape()
      const depth = (labels: Record<string, string>) => m.value('jobtable_queue_depth', labels)
      expect(depth({ kind: 'slow', status: 'queued' })).toBe(5)
      expect(depth({ kind: 'elsewhere', status: 'queued' })).toBe(2)
      expect(depth({ status: 'scheduled' })).toBe(2)
      expect(m.all('jobtable_queue_depth', { status: 'running' })).toEqual([])
      expect([m.value('jobtable_workers', { state: 'busy' }), m.value('jobtable_workers', { state: 'idle' })]).toEqual([0, 0])

      const done = track(runner)
      await runner.start()
      await done.starts(5)
      m = await metrics.scrape()
      expect(depth({ kind: 'slow', status: 'queued' })).toBe(0)
      expect(depth({ kind: 'slow', status: 'running' })).toBe(5)
      expect(depth({ kind: 'elsewhere', status: 'queued' })).toBe(2)
      expect(depth({ status: 'scheduled' })).toBe(2)
      expect([m.value('jobtable_workers', { state: 'busy' }), m.value('jobtable_workers', { state: 'idle' })]).toEqual([5, 1])
      // Each count stops at the limit.
      const c = await capped.scrape()
      expect(c.value('jobtable_queue_depth', { kind: 'slow', status: 'running' })).toBe(1)
      expect(c.value('jobtable_queue_depth', { kind: 'elsewhere', status: 'queued' })).toBe(1)
      expect(c.value('jobtable_queue_depth', { status: 'scheduled' })).toBe(1)

      release.open()
      await done.ends(ids)
      // A worker is busy until its job's final write has landed, a turn after the end is reported.
      await until(() => runner.workerCounts().busy === 0)
      m = await metrics.scrape()
      // Counted before, none now: 0, not a vanished series.
      expect(depth({ kind: 'slow', status: 'running' })).toBe(0)
      expect(depth({ kind: 'elsewhere', status: 'queued' })).toBe(2)
      expect([m.value('jobtable_workers', { state: 'busy' }), m.value('jobtable_workers', { state: 'idle' })]).toEqual([0, 6])
    } finally {
      closeAll()
    }
  })

  it('counts the database errors the runner retries, by operation, code and whether transient, and a failed read of the queue', async () => {
    try {
      const faulty = new FaultyDriver(h.store.driver())
      const runner = h.runner({ driver: faulty.driver, workers: 1 })
      const plans = runner.register(plan, act)
      const metrics = metricsOf(runner)
      const done = track(runner)
      faulty.failNth('jobClaim', 1)
      faulty.failNth('jobFinishMany', 1)
      const id = await plans.enqueue(steps('ok'))
      await runner.start()
      await done.ends([id])
      // A success the database refuses: not retried, failed as internal_error instead.
      faulty.failNth('jobFinishMany', 1, corrupt)
      const refused = await plans.enqueue(steps('ok'))
      await done.ends([refused])
      faulty.failNth('queueCounts', 1, undefined, { later: true })

      const m = await metrics.scrape()
      const errors = (operation: string, code: string, transient: string) => m.value('jobtable_database_errors_total', { operation, code, transient })
      expect(errors('claim', 'SQLITE_BUSY', 'true')).toBe(1)
      expect(errors('finish', 'SQLITE_BUSY', 'true')).toBe(1)
      expect(errors('finish', 'SQLITE_CORRUPT', 'false')).toBe(1)
      expect(errors('queue_depth', 'SQLITE_BUSY', 'true')).toBe(1)
      // No stale depth while the read fails; the next scrape has it again.
      expect(m.all('jobtable_queue_depth')).toEqual([])
      expect((await metrics.scrape()).value('jobtable_queue_depth', { status: 'scheduled' })).toBe(0)
    } finally {
      closeAll()
    }
  })

  it('carries no payload, result, error text, job id or scope, and maps a code no kind declared to one fixed value', async () => {
    try {
      const MARKERS = ['PAYLOAD-MARKER-m41', 'RESULT-MARKER-m42', 'ERROR-MARKER-m43', 'SCOPE-MARKER-m44', 'CODE-MARKER-m45']
      const runner = h.runner({ workers: 2 })
      const leaky = runner.register('leaky', {
        payload: z.strictObject({ note: z.string(), fail: z.boolean() }),
        result: (r: { note: string }) => r,
        failures: ['provider_unavailable'],
        handler: ({ note, fail }) => {
          if (fail) throw new Error(`${MARKERS[2]} while handling ${note}`)
          return { note: MARKERS[1]! }
        },
      })
      const metrics = metricsOf(runner)
      const ids = [
        await leaky.enqueue({ note: MARKERS[0]!, fail: false }, { scope: MARKERS[3] }),
        await leaky.enqueue({ note: MARKERS[0]!, fail: true }, { scope: MARKERS[3] }),
      ]
      const done = track(runner)
      await runner.start()
      await done.ends(ids)
      expect((await runner.get(ids[0]!)).result).toEqual({ note: MARKERS[1] })
      // What no runner publishes, but a channel anyone in the process may publish on could carry: any text anywhere.
      jobEndChannel.publish({ runnerId: runner.id, jobId: ids[0], kind: 'leaky', status: 'failed', error: MARKERS[4], code: MARKERS[4], durationMs: 1 })
      jobEndChannel.publish({ runnerId: runner.id, jobId: ids[0], kind: MARKERS[0], status: MARKERS[1], error: null, code: null, durationMs: 'long' })
      jobEnqueueChannel.publish({ runnerId: runner.id, kind: MARKERS[3], count: 1 })
      claimErrorChannel.publish({ runnerId: runner.id, error: `${MARKERS[4]} at postgres://user:pw@db`, transient: true })
      databaseErrorChannel.publish({ runnerId: runner.id, operation: MARKERS[2], error: 'SQLITE_BUSY', transient: 'yes' })

      const text = await metrics.registry.metrics()
      for (const secret of [...MARKERS, ...ids]) expect(text).not.toContain(secret)
      const m = samplesOf(text)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'leaky', status: 'failed', code: 'other' })).toBe(1)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'leaky', status: 'failed', code: 'internal_error' })).toBe(1)
      expect(m.value('jobtable_database_errors_total', { operation: 'claim', code: 'other', transient: 'true' })).toBe(1)
      expect(m.value('jobtable_database_errors_total', { operation: 'other', code: 'SQLITE_BUSY', transient: 'false' })).toBe(1)
      expect(m.value('jobtable_jobs_finished_total', { kind: 'other', status: 'other' })).toBe(1)
      expect(m.value('jobtable_jobs_enqueued_total', { kind: 'other' })).toBe(1)
      // A duration that is not a number is not observed: the two real ends and the first made-up one.
      expect(m.value('jobtable_job_run_duration_seconds_count', { kind: 'leaky' })).toBe(3)
      // Every label value is a kind, a status, a code of a fixed form, or a bucket bound.
      for (const v of m.labelValues()) expect(v).toMatch(/^([a-z_]+|[A-Z_]+|\d+(\.\d+)?|\+Inf)$/)
    } finally {
      closeAll()
    }
  })

  it('refuses unknown and bad options, and a registry that already holds its metrics; close() stops counting and frees the names', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: z.strictObject({}), handler: () => undefined })
    const bad: [unknown, RegExp][] = [
      [{ runner, bogus: 1 }, /unknown option "bogus"/],
      [{ runner, prefix: 'no spaces ' }, /prefix/],
      [{ runner, runDurationBuckets: [1, 0.5] }, /runDurationBuckets/],
      [{ runner, queueWaitBuckets: [] }, /queueWaitBuckets/],
      [{ runner, queueDepthLimit: -1 }, /queueDepthLimit/],
      [{ runner, registry: {} }, /registry/],
      [{ runner: {} }, /runner/],
      [undefined, /runner/],
      [null, /runner/],
    ]
    for (const [options, message] of bad) {
      expect(() => createMetrics(options as never), JSON.stringify(options)).toThrow(ConfigError)
      expect(() => createMetrics(options as never)).toThrow(message)
    }
    const registry = new Registry()
    const first = createMetrics({ runner, registry })
    expect(() => createMetrics({ runner, registry })).toThrow(/already holds jobtable_jobs_enqueued_total/)
    // Beside it under another prefix.
    const second = createMetrics({ runner, registry, prefix: 'other_' })
    await kind.enqueue({})
    expect(samplesOf(await registry.metrics()).value('other_jobs_enqueued_total', { kind: 'echo' })).toBe(1)
    first.close()
    first.close()
    second.close()
    await kind.enqueue({})
    expect((await registry.metrics()).trim()).toBe('')
    const again = createMetrics({ runner, registry })
    await kind.enqueue({})
    expect(samplesOf(await registry.metrics()).value('jobtable_jobs_enqueued_total', { kind: 'echo' })).toBe(1)
    again.close()
  })
})
