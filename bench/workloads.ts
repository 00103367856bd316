import diagnostics from 'node:diagnostics_channel'
import { setTimeout as sleep } from 'node:timers/promises'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import { Runner, jobEndChannel, jobStartChannel, type Driver, type JobEvent, type Kind, type Logger } from 'jobtable'
import { SCHEDULED_DELAY_MS, type Store } from './backend.js'
import { profileStart, profileStop } from './profiler.js'
import { percentile, RssSampler } from './stats.js'

/** What a library workload measured; main.ts adds the floor beside it. */
export interface Measurement {
  readonly mode?: string
  readonly jobs: number
  readonly jobs_per_s: number
  readonly p50_ms: number
  readonly p99_ms: number
  readonly rss_mb: number
  /** This process's CPU time (user + system) per job in the timed section: steadier than wall time on a shared machine. */
  readonly cpu_us_per_job: number
  readonly extra?: Record<string, number>
}

/** CPU microseconds used by this process since `since` (a process.cpuUsage() reading). */
export function cpuSince(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since)
  return d.user + d.system
}

export interface Payload {
  n: number
}

/**
 * A payload schema that accepts what it is given: the benchmark measures
 * the queue, not a validator (zod or valibot add their own cost per job,
 * at enqueue and again at claim).
 */
export const anyPayload: StandardSchemaV1<Payload> = {
  '~standard': { version: 1, vendor: 'jobtable-bench', validate: (value) => ({ value: value as Payload }) },
}

/** The kind every workload drains: a handler that returns at once. */
export const NOOP = 'noop'

/** Warnings and errors to stderr, so stdout keeps only the table and the JSON lines. */
export const quietLogger: Logger = {
  debug() {},
  info() {},
  warn: (fields, message) => console.error('warn', message, JSON.stringify(fields)),
  error: (fields, message) => console.error('error', message, JSON.stringify(fields)),
}

/**
 * A runner with one no-op kind, and a record of when each of that kind's
 * jobs started and ended (jobs of kinds `setup` registers are not recorded).
 */
export class Harness {
  readonly runner: Runner<Driver>
  readonly kind: Kind<Payload, Driver>
  readonly started = new Map<string, number>()
  readonly ended = new Map<string, number>()
  #waiters: { count: number; resolve: () => void }[] = []
  #startWaiters = new Map<string, () => void>()
  #onStart = (msg: unknown): void => {
    const e = msg as JobEvent
    if (e.runnerId !== this.runner.id || e.kind !== NOOP) return
    this.started.set(e.jobId, performance.now())
    const w = this.#startWaiters.get(e.jobId)
    if (w) {
      this.#startWaiters.delete(e.jobId)
      w()
    }
  }
  #onEnd = (msg: unknown): void => {
    const e = msg as JobEvent
    if (e.runnerId !== this.runner.id || e.kind !== NOOP) return
    this.ended.set(e.jobId, performance.now())
    this.#waiters = this.#waiters.filter((w) => {
      if (this.ended.size < w.count) return true
      w.resolve()
      return false
    })
  }

  /** `setup` registers other kinds first (the limited workload's). */
  constructor(driver: Driver, workers: number, setup?: (runner: Runner<Driver>) => void) {
    this.runner = new Runner({ driver, workers, logger: quietLogger })
    setup?.(this.runner)
    this.kind = this.runner.register(NOOP, { payload: anyPayload, handler: () => null })
    diagnostics.subscribe(jobStartChannel.name, this.#onStart)
    diagnostics.subscribe(jobEndChannel.name, this.#onEnd)
  }

  /** Resolves once `count` jobs of this runner have ended. */
  untilEnded(count: number): Promise<void> {
    if (this.ended.size >= count) return Promise.resolve()
    return new Promise((resolve) => this.#waiters.push({ count, resolve }))
  }

  /** Resolves when the job's handler starts (call before it can start). */
  untilStarted(id: string): Promise<void> {
    if (this.started.has(id)) return Promise.resolve()
    return new Promise((resolve) => this.#startWaiters.set(id, resolve))
  }

  /** start→end durations (ms) of every job that ended. */
  runTimes(): number[] {
    return [...this.ended].map(([id, end]) => end - (this.started.get(id) ?? end))
  }

  async close(): Promise<void> {
    diagnostics.unsubscribe(jobStartChannel.name, this.#onStart)
    diagnostics.unsubscribe(jobEndChannel.name, this.#onEnd)
    await this.runner.close()
  }
}

/** Pre-enqueues `jobs` with enqueueMany, then times the runner from start until all have ended. */
export async function drain(store: Store, jobs: number, workers: number, profilePart?: string): Promise<Measurement> {
  const h = new Harness(store.driver(), workers)
  try {
    for (let i = 0; i < jobs; i += 1000) {
      await h.kind.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, j) => ({ n: i + j })))
    }
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    await h.runner.start()
    await h.untilEnded(jobs)
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    await profileStop(profilePart)
    const rssMb = rss.maxMb
    rss.stop()
    await checkAllSucceeded(h, jobs)
    const times = h.runTimes()
    return { jobs, jobs_per_s: jobs / (elapsed / 1000), p50_ms: percentile(times, 50), p99_ms: percentile(times, 99), rss_mb: rssMb, cpu_us_per_job: cpuUs / jobs }
  } finally {
    await h.close()
  }
}

/** Reads back a sample of ended jobs through the runner: the count is not trusted alone. */
async function checkAllSucceeded(h: Harness, jobs: number): Promise<void> {
  if (h.ended.size !== jobs) throw new Error(`expected ${jobs} ended jobs, saw ${h.ended.size}`)
  const page = await h.runner.list({ status: 'queued', limit: 1 })
  if (page.jobs.length > 0) throw new Error('jobs still queued after the drain')
  const running = await h.runner.list({ status: 'running', limit: 1 })
  if (running.jobs.length > 0) throw new Error('jobs still running after the drain')
}

export type EnqueueMode = 'sequential' | 'concurrent' | 'many'

/**
 * Enqueues `jobs` with no runner started: one awaited at a time, from 16
 * concurrent producers, or with enqueueMany 1,000 at a time. Latencies are
 * per call (per enqueueMany call for `many`).
 */
export async function enqueue(store: Store, jobs: number, mode: EnqueueMode): Promise<Measurement> {
  const h = new Harness(store.driver(), 1)
  try {
    const times: number[] = []
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    if (mode === 'sequential') {
      for (let i = 0; i < jobs; i++) {
        const s = performance.now()
        await h.kind.enqueue({ n: i })
        times.push(performance.now() - s)
      }
    } else if (mode === 'concurrent') {
      const producers = 16
      let next = 0
      await Promise.all(
        Array.from({ length: producers }, async () => {
          while (next < jobs) {
            const n = next++
            const s = performance.now()
            await h.kind.enqueue({ n })
            times.push(performance.now() - s)
          }
        }),
      )
    } else {
      for (let i = 0; i < jobs; i += 1000) {
        const s = performance.now()
        await h.kind.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, j) => ({ n: i + j })))
        times.push(performance.now() - s)
      }
    }
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    await profileStop(mode)
    const rssMb = rss.maxMb
    rss.stop()
    const page = await h.runner.list({ status: 'queued', limit: 1 })
    if (page.jobs.length !== 1) throw new Error('enqueued jobs are not stored')
    return { mode, jobs, jobs_per_s: jobs / (elapsed / 1000), p50_ms: percentile(times, 50), p99_ms: percentile(times, 99), rss_mb: rssMb, cpu_us_per_job: cpuUs / jobs }
  } finally {
    await h.close()
  }
}

/**
 * Enqueue-to-handler-start with idle workers: one job at a time, each
 * timed from the enqueue call to its handler's start, and allowed to end
 * before the next, so every sample finds the workers idle.
 */
export async function latency(store: Store, samples: number, workers: number): Promise<Measurement> {
  const h = new Harness(store.driver(), workers)
  try {
    await h.runner.start()
    // Warm up the statements and the JIT; not counted.
    for (let i = 0; i < 50; i++) {
      const id = await h.kind.enqueue({ n: -1 })
      await h.untilEnded(i + 1)
      void id
    }
    const rss = new RssSampler()
    const times: number[] = []
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    for (let i = 0; i < samples; i++) {
      const s = performance.now()
      const id = await h.kind.enqueue({ n: i })
      await h.untilStarted(id)
      times.push((h.started.get(id) as number) - s)
      await h.untilEnded(50 + i + 1)
    }
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    await profileStop()
    const rssMb = rss.maxMb
    rss.stop()
    return { jobs: samples, jobs_per_s: samples / (elapsed / 1000), p50_ms: percentile(times, 50), p99_ms: percentile(times, 99), rss_mb: rssMb, cpu_us_per_job: cpuUs / samples }
  } finally {
    await h.close()
  }
}

/**
 * 4 producers enqueue one job at a time, awaited, while the workers run;
 * timed from the first enqueue until every job has ended. Latency is
 * enqueue call to end (final write landed).
 */
export async function mixed(store: Store, jobs: number, workers: number): Promise<Measurement> {
  const h = new Harness(store.driver(), workers)
  try {
    await h.runner.start()
    const enqueuedAt = new Map<string, number>()
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    let next = 0
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < jobs) {
          const n = next++
          const s = performance.now()
          enqueuedAt.set(await h.kind.enqueue({ n }), s)
        }
      }),
    )
    await h.untilEnded(jobs)
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    await profileStop()
    const rssMb = rss.maxMb
    rss.stop()
    await checkAllSucceeded(h, jobs)
    const times = [...h.ended].map(([id, end]) => end - (enqueuedAt.get(id) ?? end))
    return { jobs, jobs_per_s: jobs / (elapsed / 1000), p50_ms: percentile(times, 50), p99_ms: percentile(times, 99), rss_mb: rssMb, cpu_us_per_job: cpuUs / jobs }
  } finally {
    await h.close()
  }
}

/**
 * After a warm-up drain on a third table (not counted), drains `jobs` on an
 * empty table, then on a table that already holds `finishedRows` finished
 * jobs (inserted with raw SQL), and reports the second rate, its ratio to
 * the first, and the largest RSS across all three.
 */
export async function scale(warmStore: Store, emptyStore: Store, bigStore: Store, finishedRows: number, jobs: number, workers: number): Promise<Measurement> {
  const rss = new RssSampler()
  // Not counted: the JIT warms up on it, so the two drains compared below both run warm.
  await drain(warmStore, jobs, workers, 'warm-up')
  const empty = await drain(emptyStore, jobs, workers, 'empty')
  const seedStart = performance.now()
  await bigStore.seedFinished(finishedRows)
  const seedSeconds = (performance.now() - seedStart) / 1000
  const big = await drain(bigStore, jobs, workers, 'big')
  const rssMb = Math.max(rss.maxMb, empty.rss_mb, big.rss_mb)
  rss.stop()
  return {
    jobs,
    jobs_per_s: big.jobs_per_s,
    p50_ms: big.p50_ms,
    p99_ms: big.p99_ms,
    rss_mb: rssMb,
    cpu_us_per_job: big.cpu_us_per_job,
    extra: {
      finished_rows: finishedRows,
      empty_jobs_per_s: empty.jobs_per_s,
      ratio_to_empty: big.jobs_per_s / empty.jobs_per_s,
      empty_cpu_us_per_job: empty.cpu_us_per_job,
      /** Empty-table CPU per job over full-table CPU per job: the same ratio, less moved by other load. */
      cpu_ratio_to_empty: empty.cpu_us_per_job / big.cpu_us_per_job,
      seed_s: seedSeconds,
    },
  }
}

/**
 * Scheduled jobs must cost the claim nothing. After a warm-up drain on a
 * table of its own (not counted), drains `jobs` on an empty table, then on
 * a table that already holds `scheduledRows` jobs scheduled for next week
 * (inserted with raw SQL, as if enqueued with a delay of 7 days), the due
 * jobs enqueued through the library with enqueueMany as `drain` does, then
 * once more on a fresh empty table. Every due job must have succeeded and
 * every scheduled one still be scheduled. Reports the drain beside the
 * scheduled jobs and its ratio to the mean of the two empty-table drains
 * around it (so drift in the machine's load between them counts less),
 * and the largest RSS across all four.
 */
export async function scheduled(warmStore: Store, emptyStore: Store, bigStore: Store, emptyAfterStore: Store, scheduledRows: number, jobs: number, workers: number): Promise<Measurement> {
  const rss = new RssSampler()
  // Not counted: the JIT warms up on it, so the drains compared below all run warm.
  await drain(warmStore, jobs, workers, 'warm-up')
  const before = await drain(emptyStore, jobs, workers, 'empty')
  const seedStart = performance.now()
  await bigStore.seedScheduled(scheduledRows, SCHEDULED_DELAY_MS)
  const seedSeconds = (performance.now() - seedStart) / 1000
  const big = await drain(bigStore, jobs, workers, 'scheduled')
  // The drain counted its own ends; this reads the table: the due jobs all succeeded, the scheduled ones untouched, nothing else.
  const counts = await bigStore.countByStatus()
  const succeeded = counts['succeeded'] ?? 0
  const stillScheduled = counts['scheduled'] ?? 0
  const total = Object.values(counts).reduce((a, b) => a + b, 0)
  if (succeeded !== jobs || stillScheduled !== scheduledRows || total !== jobs + scheduledRows) {
    throw new Error(`scheduled: expected ${jobs} succeeded and ${scheduledRows} scheduled, found ${JSON.stringify(counts)}`)
  }
  const after = await drain(emptyAfterStore, jobs, workers, 'empty-after')
  const rssMb = Math.max(rss.maxMb, before.rss_mb, big.rss_mb, after.rss_mb)
  rss.stop()
  const emptyRate = (before.jobs_per_s + after.jobs_per_s) / 2
  const emptyCpu = (before.cpu_us_per_job + after.cpu_us_per_job) / 2
  // Each repeat's own figures (the table shows medians taken column by column).
  console.error(
    `bench: scheduled: ${Math.round(big.jobs_per_s)}/s beside ${scheduledRows} scheduled; empty ${Math.round(before.jobs_per_s)}/s before, ${Math.round(after.jobs_per_s)}/s after; ` +
      `ratio ${(big.jobs_per_s / emptyRate).toFixed(3)} (cpu ${(emptyCpu / big.cpu_us_per_job).toFixed(3)}); seeded in ${seedSeconds.toFixed(1)} s; ${succeeded} succeeded, ${stillScheduled} still scheduled`,
  )
  return {
    jobs,
    jobs_per_s: big.jobs_per_s,
    p50_ms: big.p50_ms,
    p99_ms: big.p99_ms,
    rss_mb: rssMb,
    cpu_us_per_job: big.cpu_us_per_job,
    extra: {
      scheduled_rows: scheduledRows,
      empty_jobs_per_s: emptyRate,
      empty_before_jobs_per_s: before.jobs_per_s,
      empty_after_jobs_per_s: after.jobs_per_s,
      ratio_to_empty: big.jobs_per_s / emptyRate,
      empty_cpu_us_per_job: emptyCpu,
      /** Empty-table CPU per job over this table's CPU per job: the same ratio, less moved by other load. */
      cpu_ratio_to_empty: emptyCpu / big.cpu_us_per_job,
      seed_s: seedSeconds,
      succeeded,
      still_scheduled: stillScheduled,
    },
  }
}

/**
 * The frame of a workload that measures the no-op kind beside another
 * kind's backlog (limited, ratelimited): after a warm-up drain on a table
 * of its own (not counted, so the drains compared all run warm), the
 * no-op kind alone, then `beside` on a fresh table, then the no-op kind
 * alone once more. Returns the three measurements, the mean of the two
 * alone, the largest RSS across all four, and the figures both report
 * against the drains alone (`alone`, for a measurement's extra).
 */
export async function besideAlone(
  [warmStore, aloneStore, besideStore, aloneAfterStore]: readonly [Store, Store, Store, Store],
  jobs: number,
  workers: number,
  beside: (store: Store, jobs: number, workers: number) => Promise<Measurement>,
): Promise<{ m: Measurement; before: Measurement; after: Measurement; aloneRate: number; aloneCpu: number; rssMb: number; alone: Record<string, number> }> {
  const rss = new RssSampler()
  await drain(warmStore, jobs, workers, 'warm-up')
  const before = await drain(aloneStore, jobs, workers, 'alone')
  const m = await beside(besideStore, jobs, workers)
  const after = await drain(aloneAfterStore, jobs, workers, 'alone-after')
  const rssMb = Math.max(rss.maxMb, before.rss_mb, m.rss_mb, after.rss_mb)
  rss.stop()
  const aloneRate = (before.jobs_per_s + after.jobs_per_s) / 2
  const aloneCpu = (before.cpu_us_per_job + after.cpu_us_per_job) / 2
  const alone = {
    alone_jobs_per_s: aloneRate,
    alone_before_jobs_per_s: before.jobs_per_s,
    alone_after_jobs_per_s: after.jobs_per_s,
    ratio_to_alone: m.jobs_per_s / aloneRate,
    alone_cpu_us_per_job: aloneCpu,
  }
  return { m, before, after, aloneRate, aloneCpu, rssMb, alone }
}

/** The limited workload's cap: at most this many of its limited kind's jobs run at once. */
export const LIMITED_CONCURRENCY = 2
/** The limited workload stops its runner with this timeout: the limited handlers take about 1 ms. */
const LIMITED_STOP_TIMEOUT_MS = 1_000
/**
 * How long the limited workload's runner goes on after the last no-op job
 * ended, before it is stopped: the limited kind runs alone meanwhile, so
 * its cap is checked on jobs that ran even if none ran in the window.
 */
const LIMITED_TAIL_MS = 1_000

/**
 * A kind at its concurrency limit must not hold back the others. After a
 * warm-up drain on a table of its own (not counted), drains `jobs` of the
 * no-op kind alone, as `drain` does; then, on a fresh table, enqueues
 * `jobs` of a kind limited to LIMITED_CONCURRENCY whose handler awaits a
 * 1 ms timer, first (older, so they sit at the head of the queue), then
 * `jobs` of the no-op kind, and times the runner from start until every
 * no-op job has ended, the limited ones running meanwhile at their own
 * pace; then the no-op kind alone once more on a fresh table. The runner
 * goes on for LIMITED_TAIL_MS after the no-op jobs are done, the limited
 * kind running alone, and is then stopped with a short timeout, with the
 * limited backlog mostly still queued. Fails unless at most
 * LIMITED_CONCURRENCY limited handlers were ever running at once (counted
 * in the handler) and the table holds every no-op job succeeded and every
 * limited one succeeded or still queued. Reports the no-op kind's rate
 * beside the limited backlog and its ratio to the mean of the two drains
 * alone around it, and the largest RSS across all four drains.
 */
export async function limited(warmStore: Store, aloneStore: Store, limitedStore: Store, aloneAfterStore: Store, jobs: number, workers: number): Promise<Measurement> {
  const { m, before, after, aloneRate, aloneCpu, rssMb, alone } = await besideAlone([warmStore, aloneStore, limitedStore, aloneAfterStore], jobs, workers, drainBesideLimited)
  const x = m.extra as Record<string, number>
  // Each repeat's own figures (the table shows medians taken column by column).
  console.error(
    `bench: limited: ${Math.round(m.jobs_per_s)}/s beside ${jobs} limited to ${LIMITED_CONCURRENCY}; alone ${Math.round(before.jobs_per_s)}/s before, ${Math.round(after.jobs_per_s)}/s after; ` +
      `ratio ${(m.jobs_per_s / aloneRate).toFixed(3)} (cpu ${(aloneCpu / m.cpu_us_per_job).toFixed(3)}; both kinds ${((m.jobs_per_s + ((m.extra as Record<string, number>)['limited_jobs_per_s'] ?? 0)) / aloneRate).toFixed(3)}); limited: at most ${x['limited_max_running']} running at once, ` +
      `${x['limited_done_in_window']} done in the window (${Math.round(x['limited_jobs_per_s'] ?? Number.NaN)}/s), ${Math.round(x['limited_tail_jobs_per_s'] ?? Number.NaN)}/s alone after it, ${x['limited_succeeded']} succeeded and ${x['limited_queued']} queued after stop (${Math.round(x['stop_ms'] ?? Number.NaN)} ms)`,
  )
  return {
    ...m,
    rss_mb: rssMb,
    extra: {
      ...alone,
      /**
       * CPU per job alone over CPU per no-op job beside the limited kind;
       * the latter includes the limited jobs run in the window, so this
       * sits below 1 even at no cost to the claim.
       */
      cpu_ratio_to_alone: aloneCpu / m.cpu_us_per_job,
      /**
       * Both kinds' jobs per second in the window over the no-op kind's
       * alone: the limited jobs run on the same workers and claims, so this
       * is what the limit costs the runner as a whole.
       */
      all_ratio_to_alone: (m.jobs_per_s + (x['limited_jobs_per_s'] ?? 0)) / aloneRate,
      /**
       * The no-op kind's share of the workers while the limited kind holds
       * its LIMITED_CONCURRENCY: the ratio a backend whose rate follows its
       * worker count (PostgreSQL's round trips) reaches at no cost to the claim.
       */
      worker_share: (workers - LIMITED_CONCURRENCY) / workers,
      ...x,
    },
  }
}

/** The limited workload's timed section (see `limited`). */
async function drainBesideLimited(store: Store, jobs: number, workers: number): Promise<Measurement> {
  let running = 0
  let maxRunning = 0
  let limitedDone = 0
  let limitedKind: Kind<Payload, Driver> | undefined
  const h = new Harness(store.driver(), workers, (runner) => {
    limitedKind = runner.register('limited', {
      payload: anyPayload,
      concurrency: LIMITED_CONCURRENCY,
      handler: async () => {
        running++
        if (running > maxRunning) maxRunning = running
        try {
          await sleep(1)
        } finally {
          running--
          limitedDone++
        }
        return null
      },
    })
  })
  try {
    const lk = limitedKind as Kind<Payload, Driver>
    // The limited jobs first, so they are older and sit ahead of the no-op ones.
    for (let i = 0; i < jobs; i += 1000) await lk.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, j) => ({ n: i + j })))
    for (let i = 0; i < jobs; i += 1000) await h.kind.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, j) => ({ n: i + j })))
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    await h.runner.start()
    await h.untilEnded(jobs)
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    const doneInWindow = limitedDone
    await profileStop('beside-limited')
    await sleep(LIMITED_TAIL_MS)
    const doneInTail = limitedDone - doneInWindow
    const rssMb = rss.maxMb
    rss.stop()
    const stopStart = performance.now()
    await h.runner.stop({ timeoutMs: LIMITED_STOP_TIMEOUT_MS })
    const stopMs = performance.now() - stopStart
    if (maxRunning > LIMITED_CONCURRENCY) throw new Error(`limited: ${maxRunning} limited handlers ran at once, over the limit of ${LIMITED_CONCURRENCY}`)
    if (h.ended.size !== jobs) throw new Error(`limited: expected ${jobs} no-op jobs ended, saw ${h.ended.size}`)
    // The handlers counted their own ends; this reads the table.
    const counts = await store.countByKindAndStatus()
    const noop = counts[NOOP] ?? {}
    const lim = counts['limited'] ?? {}
    const total = (c: Record<string, number>): number => Object.values(c).reduce((a, b) => a + b, 0)
    if ((noop['succeeded'] ?? 0) !== jobs || total(noop) !== jobs) throw new Error(`limited: expected ${jobs} no-op jobs succeeded, found ${JSON.stringify(noop)}`)
    const limSucceeded = lim['succeeded'] ?? 0
    const limQueued = lim['queued'] ?? 0
    if (limSucceeded + limQueued !== jobs || total(lim) !== jobs) throw new Error(`limited: expected ${jobs} limited jobs succeeded or queued after stop, found ${JSON.stringify(lim)}`)
    const times = h.runTimes()
    return {
      jobs,
      jobs_per_s: jobs / (elapsed / 1000),
      p50_ms: percentile(times, 50),
      p99_ms: percentile(times, 99),
      rss_mb: rssMb,
      cpu_us_per_job: cpuUs / jobs,
      extra: {
        limited_jobs: jobs,
        limited_concurrency: LIMITED_CONCURRENCY,
        limited_max_running: maxRunning,
        limited_done_in_window: doneInWindow,
        limited_jobs_per_s: doneInWindow / (elapsed / 1000),
        /** The limited kind's rate alone, in the LIMITED_TAIL_MS after the last no-op job ended. */
        limited_tail_jobs_per_s: doneInTail / (LIMITED_TAIL_MS / 1000),
        limited_succeeded: limSucceeded,
        limited_queued: limQueued,
        stop_ms: stopMs,
      },
    }
  } finally {
    await h.close()
  }
}

/** One sample of the latency loop: enqueue a job and time it to its handler's start, then wait for its end. */
async function latencySample(h: Harness, times: number[], ended: number): Promise<void> {
  const s = performance.now()
  const id = await h.kind.enqueue({ n: 0 })
  await h.untilStarted(id)
  times.push((h.started.get(id) as number) - s)
  await h.untilEnded(ended)
}

/**
 * Retention must never hold up claims. On a table holding `rows` finished
 * jobs (seeded by SQL), a started runner takes latency samples as
 * `latency` does (enqueue to handler start, one job at a time, workers
 * idle): `samples` of them, then as many as fit while the same runner's
 * `prune({ olderThanMs: 0 })` deletes the backlog (the maintenance pass's
 * code, in its batches, on the runner's own driver), then `samples` more.
 * Reports rows deleted per second, the claim latency during the prune,
 * and its ratio to the mean of the latency before and after; and what the
 * table takes on disk before and after the prune.
 */
export async function prune(store: Store, rows: number, samples: number, workers: number): Promise<Measurement> {
  const seedStart = performance.now()
  await store.seedFinished(rows)
  const seedSeconds = (performance.now() - seedStart) / 1000
  const h = new Harness(store.driver(), workers)
  try {
    await h.runner.start()
    let ended = 0
    const warm: number[] = []
    for (let i = 0; i < 50; i++) await latencySample(h, warm, ++ended)
    const before: number[] = []
    for (let i = 0; i < samples; i++) await latencySample(h, before, ++ended)
    const storedBefore = await store.storage()
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    let done = false
    const t0 = performance.now()
    let pruneMs = 0
    const pruning = h.runner.prune({ olderThanMs: 0 }).then((n) => {
      pruneMs = performance.now() - t0
      done = true
      return n
    })
    const during: number[] = []
    while (!done) await latencySample(h, during, ++ended)
    const deleted = await pruning
    const cpuUs = cpuSince(cpu0)
    await profileStop()
    const rssMb = rss.maxMb
    rss.stop()
    const storedAfter = await store.storage()
    const after: number[] = []
    for (let i = 0; i < samples; i++) await latencySample(h, after, ++ended)
    if (deleted < rows) throw new Error(`prune: deleted ${deleted} of ${rows} finished jobs`)
    const left = (await store.countByStatus())['succeeded'] ?? 0
    // Left: the samples taken after the prune, and those during it that ended after its last statement.
    if (left < samples || left > samples + during.length) throw new Error(`prune: ${left} finished jobs left, expected the ${samples} sampled after it and at most ${during.length} more`)
    const p = (xs: number[], q: number) => percentile(xs, q)
    const floorP50 = (p(before, 50) + p(after, 50)) / 2
    const floorP99 = (p(before, 99) + p(after, 99)) / 2
    const x = {
      rows,
      deleted,
      prune_s: pruneMs / 1000,
      samples_during: during.length,
      p50_before_ms: p(before, 50),
      p99_before_ms: p(before, 99),
      p50_after_ms: p(after, 50),
      p99_after_ms: p(after, 99),
      ratio_p50: p(during, 50) / floorP50,
      ratio_p99: p(during, 99) / floorP99,
      max_during_ms: Math.max(...during),
      seed_s: seedSeconds,
      ...Object.fromEntries(Object.entries(storedBefore).map(([k, v]) => [`before_${k}`, v])),
      ...Object.fromEntries(Object.entries(storedAfter).map(([k, v]) => [`after_${k}`, v])),
    }
    console.error(
      `bench: prune: ${deleted} rows in ${(pruneMs / 1000).toFixed(2)} s (${Math.round(deleted / (pruneMs / 1000))}/s); claim p50/p99 ${p(during, 50).toFixed(3)}/${p(during, 99).toFixed(3)} ms during (${during.length} samples, max ${x.max_during_ms.toFixed(1)}), ` +
        `${p(before, 50).toFixed(3)}/${p(before, 99).toFixed(3)} before, ${p(after, 50).toFixed(3)}/${p(after, 99).toFixed(3)} after: ratio ${x.ratio_p50.toFixed(2)}/${x.ratio_p99.toFixed(2)}; storage ${JSON.stringify(storedBefore)} -> ${JSON.stringify(storedAfter)}`,
    )
    return { jobs: deleted, jobs_per_s: deleted / (pruneMs / 1000), p50_ms: p(during, 50), p99_ms: p(during, 99), rss_mb: rssMb, cpu_us_per_job: cpuUs / deleted, extra: x }
  } finally {
    await h.close()
  }
}
