import { setTimeout as sleep } from 'node:timers/promises'
import { Runner, type Driver, type Kind } from 'jobtable'
import type { Store } from './backend.js'
import { profileStart, profileStop } from './profiler.js'
import { percentile, RssSampler } from './stats.js'
import { anyPayload, besideAlone, cpuSince, drain, Harness, NOOP, quietLogger, type Measurement, type Payload } from './workloads.js'

/**
 * The workloads of rate limits and fair claims (`--workload
 * ratelimited,fair`). Both read their verdict from what the database
 * recorded (each job's started_at, Store.starts), not from what this
 * process saw: a start is a claim, stamped with the claiming runner's
 * clock in the claim's own transaction.
 */

/** The ratelimited workload's rule: at most RATE_LIMIT starts of its rated kind per RATE_PERIOD_MS. */
export const RATE_LIMIT = 200
export const RATE_PERIOD_MS = 500
/** The rated kind's name. */
const RATED = 'rated'
/**
 * How long the ratelimited workload's runner goes on after the last
 * unlimited job ended, the rated kind running alone: its windows are
 * measured over the whole run, so there are several even where the
 * unlimited drain takes less than one.
 */
const RATE_TAIL_MS = 3_000
/** The rated handlers return at once: a stop waits for little. */
const RATE_STOP_TIMEOUT_MS = 1_000

/**
 * A rate limit must not hold back the other kinds, and must be met, not
 * undershot. After a warm-up drain on a table of its own (not counted),
 * drains `jobs` of the no-op kind alone, as `drain` does; then, on a fresh
 * table, enqueues `jobs` of a kind limited to RATE_LIMIT starts per
 * RATE_PERIOD_MS (key 'kind', a no-op handler) first, so they sit at the
 * head of the queue, then `jobs` of the no-op kind, and times the runner
 * from start until every no-op job has ended; the runner goes on for
 * RATE_TAIL_MS, the rated kind alone, and is stopped with its backlog
 * mostly still queued; then the no-op kind alone once more on a fresh
 * table. Reports the no-op kind's rate beside the rated backlog and its
 * ratio to the mean of the two drains alone around it; and, from the
 * rated jobs' started_at, the most starts in any window of the rule
 * (which must not pass the limit) and the starts in each whole window
 * from the first, against the limit.
 */
export async function ratelimited(warmStore: Store, aloneStore: Store, ratedStore: Store, aloneAfterStore: Store, jobs: number, workers: number): Promise<Measurement> {
  const { m, before, after, aloneRate, aloneCpu, rssMb, alone } = await besideAlone([warmStore, aloneStore, ratedStore, aloneAfterStore], jobs, workers, drainBesideRated)
  const x = m.extra as Record<string, number>
  console.error(
    `bench: ratelimited: ${Math.round(m.jobs_per_s)}/s beside ${jobs} rated at ${RATE_LIMIT} per ${RATE_PERIOD_MS} ms; alone ${Math.round(before.jobs_per_s)}/s before, ${Math.round(after.jobs_per_s)}/s after; ` +
      `ratio ${(m.jobs_per_s / aloneRate).toFixed(3)}; rated: at most ${x['rated_max_in_window']} in any window (${x['rated_max_in_closed_window']} closed), ${x['rated_per_window_mean']?.toFixed(1)} a window on average ` +
      `(min ${x['rated_per_window_min']}, max ${x['rated_per_window_max']}, ${x['rated_windows']} whole windows), ${x['rated_started']} started in all`,
  )
  return {
    ...m,
    rss_mb: rssMb,
    extra: {
      ...alone,
      /** CPU per job alone over CPU per no-op job beside the rated kind (whose own starts are in the latter). */
      cpu_ratio_to_alone: aloneCpu / m.cpu_us_per_job,
      /** Both kinds' jobs per second in the window over the no-op kind's alone. */
      all_ratio_to_alone: (m.jobs_per_s + (x['rated_jobs_per_s_in_drain'] ?? 0)) / aloneRate,
      ...x,
    },
  }
}

/** The ratelimited workload's timed section (see `ratelimited`). */
async function drainBesideRated(store: Store, jobs: number, workers: number): Promise<Measurement> {
  let ratedStarted = 0
  let rated: Kind<Payload, Driver> | undefined
  const h = new Harness(store.driver(), workers, (runner) => {
    rated = runner.register(RATED, {
      payload: anyPayload,
      rateLimit: { limit: RATE_LIMIT, periodMs: RATE_PERIOD_MS },
      handler: () => {
        ratedStarted++
        return null
      },
    })
  })
  try {
    const rk = rated as Kind<Payload, Driver>
    // The rated jobs first, so they are older and sit ahead of the no-op ones.
    for (let i = 0; i < jobs; i += 1000) await rk.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, j) => ({ n: i + j })))
    for (let i = 0; i < jobs; i += 1000) await h.kind.enqueueMany(Array.from({ length: Math.min(1000, jobs - i) }, (_, j) => ({ n: i + j })))
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    await h.runner.start()
    await h.untilEnded(jobs)
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    const ratedInDrain = ratedStarted
    await profileStop('beside-rated')
    await sleep(RATE_TAIL_MS)
    // Windows that end by now are whole: every start in them is recorded once the runner has stopped.
    const end = Date.now()
    const rssMb = rss.maxMb
    rss.stop()
    await h.runner.stop({ timeoutMs: RATE_STOP_TIMEOUT_MS })
    if (h.ended.size !== jobs) throw new Error(`ratelimited: expected ${jobs} no-op jobs ended, saw ${h.ended.size}`)
    const counts = await store.countByKindAndStatus()
    const noop = counts[NOOP] ?? {}
    const lim = counts[RATED] ?? {}
    const total = (c: Record<string, number>): number => Object.values(c).reduce((a, b) => a + b, 0)
    if ((noop['succeeded'] ?? 0) !== jobs || total(noop) !== jobs) throw new Error(`ratelimited: expected ${jobs} no-op jobs succeeded, found ${JSON.stringify(noop)}`)
    if ((lim['succeeded'] ?? 0) + (lim['queued'] ?? 0) !== jobs || total(lim) !== jobs) throw new Error(`ratelimited: expected ${jobs} rated jobs succeeded or queued after stop, found ${JSON.stringify(lim)}`)
    const starts = (await store.starts(RATED)).map((s) => s.at)
    const w = windows(starts, RATE_PERIOD_MS, end)
    if (w.max > RATE_LIMIT) console.error(`bench: ratelimited: WARNING: ${w.max} starts in one window of ${RATE_PERIOD_MS} ms, over the limit of ${RATE_LIMIT}`)
    if (w.maxClosed > RATE_LIMIT) console.error(`bench: ratelimited: note: ${w.maxClosed} starts in one closed window [t, t + ${RATE_PERIOD_MS}] (a claim at the window's end counted the one at its start as gone)`)
    const times = h.runTimes()
    return {
      jobs,
      jobs_per_s: jobs / (elapsed / 1000),
      p50_ms: percentile(times, 50),
      p99_ms: percentile(times, 99),
      rss_mb: rssMb,
      cpu_us_per_job: cpuUs / jobs,
      extra: {
        rated_limit: RATE_LIMIT,
        rated_period_ms: RATE_PERIOD_MS,
        rated_started: starts.length,
        /** The rated kind's starts while the no-op kind drained, per second: the rule allows RATE_LIMIT / RATE_PERIOD_MS. */
        rated_jobs_per_s_in_drain: ratedInDrain / (elapsed / 1000),
        /** The most starts in any window of the rule's length, [t, t + period): at most the limit. */
        rated_max_in_window: w.max,
        /** The same over closed windows [t, t + period], as src/driver.ts's RateRule counts (one ms longer). */
        rated_max_in_closed_window: w.maxClosed,
        rated_windows: w.per.length,
        rated_per_window_mean: w.per.length === 0 ? Number.NaN : w.per.reduce((a, b) => a + b, 0) / w.per.length,
        rated_per_window_min: w.per.length === 0 ? Number.NaN : Math.min(...w.per),
        rated_per_window_max: w.per.length === 0 ? Number.NaN : Math.max(...w.per),
        /** The mean starts per whole window over the limit: 1 when the limit is met exactly, window after window. */
        rated_ratio_to_limit: w.per.length === 0 ? Number.NaN : w.per.reduce((a, b) => a + b, 0) / w.per.length / RATE_LIMIT,
        rated_windows_at_limit: w.per.filter((n) => n === RATE_LIMIT).length,
      },
    }
  } finally {
    await h.close()
  }
}

/**
 * Of start times `at` (ascending, whole ms): the most in any window of
 * periodMs ms, [t, t + periodMs) ("at most limit per periodMs"); the most
 * in any closed window [t, t + periodMs], one ms longer (src/driver.ts's
 * RateRule counts the claims at or after now - periodMs, so a claim at
 * t + periodMs still counts one at t); and the count in each whole window
 * of periodMs from the first start up to `end`.
 */
export function windows(at: readonly number[], periodMs: number, end: number): { max: number; maxClosed: number; per: number[] } {
  const most = (span: number): number => {
    let max = 0
    for (let i = 0, j = 0; i < at.length; i++) {
      while (j < at.length && (at[j] as number) <= (at[i] as number) + span) j++
      max = Math.max(max, j - i)
    }
    return max
  }
  const max = most(periodMs - 1)
  const maxClosed = most(periodMs)
  if (at.length === 0) return { max, maxClosed, per: [] }
  const first = at[0] as number
  const per = Array.from({ length: Math.max(0, Math.floor((end - first) / periodMs)) }, () => 0)
  for (const t of at) {
    const k = Math.floor((t - first) / periodMs)
    if (k < per.length) per[k] = (per[k] as number) + 1
  }
  return { max, maxClosed, per }
}

/** The fair workload's households, and the biggest one's backlog. */
export const HOUSEHOLDS = 100
export const BIGGEST_BACKLOG = 5_000

/**
 * Each household's backlog, biggest first: from BIGGEST_BACKLOG down to 1,
 * evenly spaced on a log scale (a few households with thousands of jobs,
 * half with 70 or fewer): 60,642 jobs in all.
 */
export function backlogs(): number[] {
  return Array.from({ length: HOUSEHOLDS }, (_, i) => Math.max(1, Math.round(BIGGEST_BACKLOG ** ((HOUSEHOLDS - 1 - i) / (HOUSEHOLDS - 1)))))
}

const household = (i: number): string => `household-${String(i).padStart(3, '0')}`

/**
 * One household's big backlog must not hold up another's first job. After
 * a warm-up drain (not counted), enqueues HOUSEHOLDS households' backlogs
 * (`backlogs()`, the biggest first, so oldest-first claims would take it
 * all before anyone else) of a kind with `fairness: 'scope'` and drains
 * them; then the same backlogs of a kind without it, on a fresh table, as
 * the baseline. Reports, from the jobs' started_at: each household's
 * first-job wait in claim rounds (the starts before it, over the
 * households with work: a round gives each one start), its p99 and most;
 * the same in ms from the first start; Jain's fairness index of the
 * households' starts in each second, over the households that still had
 * work at that second's end (the index is 1 when they all got as many);
 * and the fair drain's rate and its ratio to the baseline's (what fair
 * order costs the claim).
 */
export async function fair(warmStore: Store, fairStore: Store, plainStore: Store, warmJobs: number, workers: number): Promise<Measurement> {
  const rss = new RssSampler()
  await drain(warmStore, warmJobs, workers, 'warm-up')
  const f = await drainHouseholds(fairStore, workers, true)
  const p = await drainHouseholds(plainStore, workers, false)
  const rssMb = Math.max(rss.maxMb, f.rssMb, p.rssMb)
  rss.stop()
  const fx = f.fairness
  const px = p.fairness
  console.error(
    `bench: fair: ${f.jobs} jobs of ${HOUSEHOLDS} households (${BIGGEST_BACKLOG} to 1 each) at ${Math.round(f.rate)}/s fair, ${Math.round(p.rate)}/s oldest first (ratio ${(f.rate / p.rate).toFixed(3)}); ` +
      `first job's wait p99 ${fx.waitRoundsP99.toFixed(2)} rounds (${fx.waitMsP99} ms; most ${fx.waitRoundsMax.toFixed(2)}) fair, ${px.waitRoundsP99.toFixed(2)} rounds (${px.waitMsP99} ms) oldest first; ` +
      `Jain per second min ${fx.jainMin.toFixed(3)} mean ${fx.jainMean.toFixed(3)} over ${fx.jainSeconds} s (${fx.starvedSeconds} s starved) fair, ` +
      `min ${px.jainMin.toFixed(3)} over ${px.jainSeconds} s (${px.starvedSeconds} s starved) oldest first`,
  )
  return {
    jobs: f.jobs,
    jobs_per_s: f.rate,
    // For fair, the first-job waits (ms from the first start), not the run times.
    p50_ms: fx.waitMsP50,
    p99_ms: fx.waitMsP99,
    rss_mb: rssMb,
    cpu_us_per_job: f.cpuUs / f.jobs,
    extra: {
      households: HOUSEHOLDS,
      biggest_backlog: BIGGEST_BACKLOG,
      first_wait_p99_rounds: fx.waitRoundsP99,
      first_wait_max_rounds: fx.waitRoundsMax,
      first_wait_p99_ms: fx.waitMsP99,
      /** The first HOUSEHOLDS starts: one claim round when every household has work. */
      first_round_ms: fx.firstRoundMs,
      jain_per_second_min: fx.jainMin,
      jain_per_second_mean: fx.jainMean,
      jain_seconds: fx.jainSeconds,
      /** Seconds in which households had work and none of them got a start (0 when fair). */
      starved_seconds: fx.starvedSeconds,
      plain_jobs_per_s: p.rate,
      ratio_to_plain: f.rate / p.rate,
      plain_cpu_us_per_job: p.cpuUs / p.jobs,
      plain_first_wait_p99_rounds: px.waitRoundsP99,
      plain_first_wait_p99_ms: px.waitMsP99,
      plain_jain_per_second_min: px.jainMin,
      plain_jain_per_second_mean: px.jainMean,
      plain_starved_seconds: px.starvedSeconds,
    },
  }
}

/** Drains the households' backlogs of a fair kind, or of a plain one; returns its rate and what its starts say. */
async function drainHouseholds(store: Store, workers: number, isFair: boolean) {
  const sizes = backlogs()
  const total = sizes.reduce((a, b) => a + b, 0)
  const name = isFair ? 'fair' : 'plain'
  let ended = 0
  let allEnded!: () => void
  const done = new Promise<void>((resolve) => (allEnded = resolve))
  const runner = new Runner({ driver: store.driver(), workers, logger: quietLogger })
  const kind = runner.register(name, {
    payload: anyPayload,
    ...(isFair ? { fairness: 'scope' as const } : {}),
    handler: () => {
      if (++ended === total) allEnded()
      return null
    },
  })
  try {
    for (let h = 0; h < HOUSEHOLDS; h++) {
      const size = sizes[h] as number
      for (let i = 0; i < size; i += 1000) await kind.enqueueMany(Array.from({ length: Math.min(1000, size - i) }, (_, j) => ({ n: i + j })), { scope: household(h) })
    }
    const rss = new RssSampler()
    await profileStart()
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    await runner.start()
    await done
    const elapsed = performance.now() - t0
    const cpuUs = cpuSince(cpu0)
    await profileStop(name)
    const rssMb = rss.maxMb
    rss.stop()
    // Every final write lands before the table is read.
    await runner.stop()
    const counts = (await store.countByKindAndStatus())[name] ?? {}
    if ((counts['succeeded'] ?? 0) !== total) throw new Error(`fair: expected ${total} ${name} jobs succeeded, found ${JSON.stringify(counts)}`)
    const starts = await store.starts(name)
    if (starts.length !== total) throw new Error(`fair: ${starts.length} starts recorded for ${total} jobs`)
    return { jobs: total, rate: total / (elapsed / 1000), cpuUs, rssMb, fairness: fairnessOf(starts, Array.from({ length: HOUSEHOLDS }, (_, h) => household(h))) }
  } finally {
    await runner.close()
  }
}

/**
 * What the starts (ascending by time) say of fairness across `households`,
 * which all had work when the first started. A start's rank is the number
 * of starts strictly before it (the jobs of one claim share a time).
 */
export function fairnessOf(starts: readonly { scope: string | null; at: number }[], households: readonly string[]) {
  const times = starts.map((s) => s.at)
  const firstAt = new Map<string | null, number>()
  const lastAt = new Map<string | null, number>()
  for (const s of starts) {
    if (!firstAt.has(s.scope)) firstAt.set(s.scope, s.at)
    lastAt.set(s.scope, s.at)
  }
  const before = (t: number): number => {
    let lo = 0
    let hi = times.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if ((times[mid] as number) < t) lo = mid + 1
      else hi = mid
    }
    return lo
  }
  const t0 = times[0] ?? 0
  const firsts = households.map((h) => firstAt.get(h) ?? Number.NaN)
  const rounds = firsts.map((t) => before(t) / households.length)
  const waitsMs = firsts.map((t) => t - t0)
  // Jain's index per second, over the households whose last start comes at or after the second's end: they had work all through it.
  const jains: number[] = []
  let starved = 0
  const seconds = times.length === 0 ? 0 : Math.floor(((times[times.length - 1] as number) - t0) / 1000) + 1
  for (let b = 0; b < seconds; b++) {
    const from = t0 + b * 1000
    const to = from + 1000
    const busy = households.filter((h) => (lastAt.get(h) ?? -Infinity) >= to)
    if (busy.length < 2) continue
    const n = new Map<string, number>(busy.map((h) => [h, 0]))
    for (let i = before(from); i < times.length && (times[i] as number) < to; i++) {
      const scope = (starts[i] as { scope: string | null }).scope
      if (scope !== null && n.has(scope)) n.set(scope, (n.get(scope) as number) + 1)
    }
    const xs = [...n.values()]
    const sum = xs.reduce((a, b) => a + b, 0)
    const squares = xs.reduce((a, b) => a + b * b, 0)
    // No household with work got a start (another, running out in that second, took them all): no index, counted apart.
    if (sum === 0) starved++
    else jains.push((sum * sum) / (xs.length * squares))
  }
  const firstRound = times[Math.min(times.length, households.length) - 1]
  return {
    waitRoundsP99: percentile(rounds, 99),
    waitRoundsMax: Math.max(...rounds),
    waitMsP50: percentile(waitsMs, 50),
    waitMsP99: percentile(waitsMs, 99),
    firstRoundMs: firstRound === undefined ? Number.NaN : firstRound - t0,
    jainMin: jains.length === 0 ? Number.NaN : Math.min(...jains),
    jainMean: jains.length === 0 ? Number.NaN : jains.reduce((a, b) => a + b, 0) / jains.length,
    jainSeconds: jains.length,
    starvedSeconds: starved,
  }
}
