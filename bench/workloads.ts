import diagnostics from 'node:diagnostics_channel'
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
function cpuSince(since: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(since)
  return d.user + d.system
}

interface Payload {
  n: number
}

/**
 * A payload schema that accepts what it is given: the benchmark measures
 * the queue, not a validator (zod or valibot add their own cost per job,
 * at enqueue and again at claim).
 */
const anyPayload: StandardSchemaV1<Payload> = {
  '~standard': { version: 1, vendor: 'jobtable-bench', validate: (value) => ({ value: value as Payload }) },
}

/** Warnings and errors to stderr, so stdout keeps only the table and the JSON lines. */
const quietLogger: Logger = {
  debug() {},
  info() {},
  warn: (fields, message) => console.error('warn', message, JSON.stringify(fields)),
  error: (fields, message) => console.error('error', message, JSON.stringify(fields)),
}

/** A runner with one no-op kind, and a record of when each of its jobs started and ended. */
class Harness {
  readonly runner: Runner<Driver>
  readonly kind: Kind<Payload, Driver>
  readonly started = new Map<string, number>()
  readonly ended = new Map<string, number>()
  #waiters: { count: number; resolve: () => void }[] = []
  #startWaiters = new Map<string, () => void>()
  #onStart = (msg: unknown): void => {
    const e = msg as JobEvent
    if (e.runnerId !== this.runner.id) return
    this.started.set(e.jobId, performance.now())
    const w = this.#startWaiters.get(e.jobId)
    if (w) {
      this.#startWaiters.delete(e.jobId)
      w()
    }
  }
  #onEnd = (msg: unknown): void => {
    const e = msg as JobEvent
    if (e.runnerId !== this.runner.id) return
    this.ended.set(e.jobId, performance.now())
    this.#waiters = this.#waiters.filter((w) => {
      if (this.ended.size < w.count) return true
      w.resolve()
      return false
    })
  }

  constructor(driver: Driver, workers: number) {
    this.runner = new Runner({ driver, workers, logger: quietLogger })
    this.kind = this.runner.register('noop', { payload: anyPayload, handler: () => null })
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
