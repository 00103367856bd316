import diagnostics from 'node:diagnostics_channel'
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client'
import { ConfigError } from '../errors.js'
import { CODE_INTERNAL, CODE_TIMEOUT, CODE_UNKNOWN_KIND } from '../job.js'
import { optionsObject } from '../options.js'
import {
  claimErrorChannel,
  databaseErrorChannel,
  jobEndChannel,
  jobEnqueueChannel,
  jobStartChannel,
  type ClaimErrorMessage,
  type DatabaseErrorMessage,
  type DatabaseOperation,
  type EndStatus,
  type JobEndMessage,
  type JobEnqueueMessage,
  type JobStartMessage,
} from '../runner/channels.js'
import { errorCode, isTransient } from '../runner/backoff.js'
import type { Runner } from '../runner/runner.js'
import type { RateLimitState } from '../index.js'

/** Options of createMetrics. Each default is given beside its field; unknown keys are refused (ConfigError). */
export interface MetricsOptions {
  /**
   * The runner to report: what it enqueues, starts and finishes (other
   * runners in the process are left out), its workers, and the queue of
   * its database. Required. It need not be started: a process that only
   * enqueues reports its enqueues and the queue.
   */
  readonly runner: Runner
  /** The prom-client Registry to register the metrics in. Default: a new one. */
  readonly registry?: Registry
  /** The start of every metric's name. Default `jobtable_`. */
  readonly prefix?: string
  /** The upper bounds, in seconds, of the run duration histogram's buckets. Default DEFAULT_BUCKETS. */
  readonly runDurationBuckets?: readonly number[]
  /** The upper bounds, in seconds, of the queue wait histogram's buckets. Default DEFAULT_BUCKETS. */
  readonly queueWaitBuckets?: readonly number[]
  /**
   * The queue depth is read from the database at each scrape, each count
   * exact up to this limit and reading the limit beyond it, so a scrape
   * reads at most this many index entries per kind and status whatever
   * the backlog (about 1 ms per kind at 10,000 on SQLite here). 0 reports
   * no queue depth and makes no query. Default 10000.
   */
  readonly queueDepthLimit?: number
}

const METRICS_OPTIONS = Object.keys({
  runner: 1,
  registry: 1,
  prefix: 1,
  runDurationBuckets: 1,
  queueWaitBuckets: 1,
  queueDepthLimit: 1,
} satisfies Record<keyof MetricsOptions, 1>)

/** A runner's metrics: the registry holding them, and close(). */
export interface Metrics {
  /** The registry: `await registry.metrics()` is the Prometheus text, `registry.contentType` its media type. */
  readonly registry: Registry
  /** Stops listening to the runner and removes these metrics from the registry. Idempotent. */
  close(): void
  [Symbol.dispose](): void
}

/** The default histogram buckets, in seconds: 5 ms to an hour, for jobs that take milliseconds and jobs that take minutes. */
export const DEFAULT_BUCKETS: readonly number[] = Object.freeze([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600])

/** The failure codes the runner stores itself: label values as they are. */
const BUILT_IN_CODES: ReadonlySet<string> = new Set([CODE_INTERNAL, CODE_TIMEOUT, CODE_UNKNOWN_KIND])

/**
 * The label value of anything the runner never publishes but a message on
 * its channels (which any code in the process may publish on) could
 * carry: a kind it does not know, a code the kind did not declare, a
 * status or operation of no known name, a database error code of another
 * form. One fixed value, so no other text becomes a label.
 */
export const OTHER = 'other'

const END_STATUSES: ReadonlySet<string> = new Set(['succeeded', 'failed', 'cancelled', 'retry', 'snoozed'] satisfies EndStatus[])
const OPERATIONS: ReadonlySet<string> = new Set(['finish', 'start', 'heartbeat', 'maintenance'] satisfies DatabaseOperation[])

/**
 * Makes Prometheus metrics (prom-client) of one runner, from its
 * diagnostics channels and, at each scrape, its workers and its
 * database's queue:
 *
 * - `jobtable_jobs_enqueued_total{kind}`, `jobtable_jobs_started_total{kind}`
 * - `jobtable_jobs_finished_total{kind,status,code}`: status succeeded,
 *   failed, cancelled, retry or snoozed; code the failure behind a failed
 *   or retry end (a code the kind declared, internal_error or timeout;
 *   `other` for anything else, which the runner never reports)
 * - `jobtable_retries_total{kind}`, `jobtable_timeouts_total{kind}`
 * - `jobtable_database_errors_total{operation,code,transient}`: operation
 *   claim, finish, start, heartbeat, maintenance (each tried again), or
 *   queue_depth and rate_limits (a scrape's reads)
 * - `jobtable_job_run_duration_seconds{kind}` (handler start to end) and
 *   `jobtable_job_queue_wait_seconds{kind}` (claimable to start), by the
 *   runner's clock
 * - `jobtable_workers{state}`: busy and idle
 * - `jobtable_queue_depth{kind,status}`: queued and running per kind,
 *   scheduled across kinds (no kind label), each at most queueDepthLimit
 * - `jobtable_rate_limit{key}` and `jobtable_rate_limit_used{key}`: each
 *   rate limit of the runner's kinds and the claims in its window now,
 *   a per-scope limit as `<kind>@*` (its busiest scope), never a series
 *   per scope
 * - `jobtable_cooldown_until_seconds{key}`: the end of each cooldown in
 *   force (epoch seconds); a per-scope key as `<kind>@*` (the latest
 *   end), a key that is neither a rate limit's nor a kind's as `other`
 *
 * No label or value carries a payload, a result, an error's text, a job
 * id or a scope. Unknown options are refused (ConfigError).
 */
export function createMetrics(options: MetricsOptions): Metrics {
  if (options === null || typeof options !== 'object') throw new ConfigError('createMetrics: options { runner } are required')
  const given = optionsObject(options, METRICS_OPTIONS, 'createMetrics')
  const { runner, prefix = 'jobtable_', queueDepthLimit = 10_000 } = given
  if (runner === null || typeof runner !== 'object' || typeof runner.id !== 'string' || typeof runner.workerCounts !== 'function') {
    throw new ConfigError('createMetrics: runner must be a jobtable Runner')
  }
  const registry = given.registry ?? new Registry()
  if (registry === null || typeof registry !== 'object' || typeof registry.registerMetric !== 'function' || typeof registry.metrics !== 'function') {
    throw new ConfigError('createMetrics: registry must be a prom-client Registry')
  }
  if (typeof prefix !== 'string' || !/^([a-zA-Z_:][a-zA-Z0-9_:]*)?$/.test(prefix)) {
    throw new ConfigError('createMetrics: prefix must be empty or start a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)')
  }
  const runBuckets = bucketsOf('runDurationBuckets', given.runDurationBuckets)
  const waitBuckets = bucketsOf('queueWaitBuckets', given.queueWaitBuckets)
  if (!Number.isSafeInteger(queueDepthLimit) || queueDepthLimit < 0) throw new ConfigError('createMetrics: queueDepthLimit must be an integer >= 0')
  const driver = runner.driver
  if (queueDepthLimit > 0 && typeof driver.queueCounts !== 'function') {
    throw new ConfigError('createMetrics: the runner’s driver cannot count its queue (queueCounts); pass queueDepthLimit: 0')
  }
  const names = [
    'jobs_enqueued_total',
    'jobs_started_total',
    'jobs_finished_total',
    'retries_total',
    'timeouts_total',
    'database_errors_total',
    'job_run_duration_seconds',
    'job_queue_wait_seconds',
    'workers',
    'queue_depth',
    'rate_limit',
    'rate_limit_used',
    'cooldown_until_seconds',
  ]
  for (const name of names) {
    // Before any is made, so a refusal leaves the registry as it was.
    if (registry.getSingleMetric(prefix + name) !== undefined) {
      throw new ConfigError(`createMetrics: the registry already holds ${prefix + name} (another runner's metrics? give each its own registry or prefix)`)
    }
  }
  const registers = [registry]
  const runnerId = runner.id

  /**
   * The queue read of the scrape under way. A registry collects every
   * metric at once, so the database errors wait for it (queue_depth is
   * registered first, and so read first): a failed read is counted in the
   * same scrape.
   */
  let reading: Promise<unknown> | undefined
  if (queueDepthLimit > 0) {
    /** Every kind and status counted before: one with no job now reads 0 rather than vanishing. */
    const seen = new Set<string>()
    const depth: Gauge = new Gauge({
      name: `${prefix}queue_depth`,
      help: `Live jobs in the database: queued and running per kind, scheduled across kinds; each count is exact up to ${queueDepthLimit} and reads ${queueDepthLimit} beyond it.`,
      labelNames: ['kind', 'status'],
      registers,
      async collect() {
        const read = driver.queueCounts({ limit: queueDepthLimit })
        reading = read
        let counts
        try {
          counts = await read
        } catch (err) {
          // No stale counts: the series go missing until a read succeeds, and the failure is counted.
          depth.reset()
          databaseErrors.inc({ operation: 'queue_depth', code: databaseCode(errorCode(err)), transient: String(isTransient(err)) })
          return
        }
        depth.reset()
        let scheduled = 0
        const now = new Map<string, number>()
        for (const { kind, status, count } of counts) {
          if (kind === null) scheduled += count
          else now.set(JSON.stringify([kind, status]), count)
        }
        for (const key of now.keys()) seen.add(key)
        for (const key of seen) {
          const [kind, status] = JSON.parse(key) as [string, string]
          depth.set({ kind, status }, now.get(key) ?? 0)
        }
        depth.set({ status: 'scheduled' }, scheduled)
      },
    })
  }

  /**
   * The rate limits and cooldowns of the scrape under way, read once for
   * the three gauges that report them (they collect one after another, as
   * the registry starts them, while the read is pending). A failed read
   * is counted once, in the same scrape.
   */
  let rates: Promise<RateSnapshot | undefined> | undefined
  const rateSnapshot = (): Promise<RateSnapshot | undefined> => {
    if (rates !== undefined) return rates
    const read = readRates(runner).catch((err: unknown) => {
      databaseErrors.inc({ operation: 'rate_limits', code: databaseCode(errorCode(err)), transient: String(isTransient(err)) })
      return undefined
    })
    rates = read
    void read.finally(() => {
      if (rates === read) rates = undefined
    })
    return read
  }
  const rateLimit: Gauge = new Gauge({
    name: `${prefix}rate_limit`,
    help: 'The claims each rate limit allows per window, by its key (a per-scope limit as <kind>@*).',
    labelNames: ['key'],
    registers,
    async collect() {
      const snapshot = await rateSnapshot()
      rateLimit.reset()
      for (const state of snapshot?.limits ?? []) rateLimit.set({ key: state.key }, state.limit)
    },
  })
  const rateUsed: Gauge = new Gauge({
    name: `${prefix}rate_limit_used`,
    help: 'The claims in each rate limit’s sliding window now, by its key (a per-scope limit as <kind>@*: its busiest scope).',
    labelNames: ['key'],
    registers,
    async collect() {
      const snapshot = await rateSnapshot()
      rateUsed.reset()
      for (const state of snapshot?.limits ?? []) rateUsed.set({ key: state.key }, state.used)
    },
  })
  const cooldownUntil: Gauge = new Gauge({
    name: `${prefix}cooldown_until_seconds`,
    help: 'When each cooldown in force ends, in epoch seconds, by its key (a per-scope key as <kind>@*: the latest end; a key of no rate limit or kind as other).',
    labelNames: ['key'],
    registers,
    async collect() {
      const snapshot = await rateSnapshot()
      cooldownUntil.reset()
      for (const [key, until] of snapshot?.cooldowns ?? []) cooldownUntil.set({ key }, until / 1000)
    },
  })

  const enqueued = new Counter({ name: `${prefix}jobs_enqueued_total`, help: 'Jobs stored by enqueues of this runner (a transactional enqueue when made, even if its transaction rolls back).', labelNames: ['kind'], registers })
  const started = new Counter({ name: `${prefix}jobs_started_total`, help: 'Handlers started.', labelNames: ['kind'], registers })
  const finished = new Counter({
    name: `${prefix}jobs_finished_total`,
    help: 'Attempts ended, by how: succeeded, failed, cancelled, retry or snoozed; code is the failure behind a failed or retry end.',
    labelNames: ['kind', 'status', 'code'],
    registers,
  })
  const retries = new Counter({ name: `${prefix}retries_total`, help: 'Failed attempts sent back to the queue for a retry.', labelNames: ['kind'], registers })
  const timeouts = new Counter({ name: `${prefix}timeouts_total`, help: 'Attempts that passed their deadline (failed or retried).', labelNames: ['kind'], registers })
  const databaseErrors = new Counter({
    name: `${prefix}database_errors_total`,
    help: 'Failed database operations of the runner (each tried again; queue_depth and rate_limits: a scrape’s reads), by the database’s error code.',
    labelNames: ['operation', 'code', 'transient'],
    registers,
    async collect() {
      await reading?.catch(() => undefined)
      await rates
    },
  })
  const runDuration = new Histogram({ name: `${prefix}job_run_duration_seconds`, help: 'From a handler’s start to its end, by the runner’s clock.', labelNames: ['kind'], buckets: [...runBuckets], registers })
  const queueWait = new Histogram({ name: `${prefix}job_queue_wait_seconds`, help: 'From when a job became claimable (enqueued, or due) to its start, by the runner’s clock.', labelNames: ['kind'], buckets: [...waitBuckets], registers })
  const workers = new Gauge({
    name: `${prefix}workers`,
    help: 'The runner’s workers: busy (running a handler) or idle (waiting for work).',
    labelNames: ['state'],
    registers,
    collect() {
      const counts = runner.workerCounts()
      this.set({ state: 'busy' }, counts.busy)
      this.set({ state: 'idle' }, counts.idle)
    },
  })
  /** The declared failure codes of each kind the runner knows, read once from it (a kind it does not know is not kept). */
  const declared = new Map<string, ReadonlySet<string>>()
  const codesOf = (kind: unknown): ReadonlySet<string> | undefined => {
    if (typeof kind !== 'string') return undefined
    let codes = declared.get(kind)
    if (codes === undefined) {
      const known = runner.kind(kind)
      if (known === undefined) return undefined
      codes = new Set(known.failures)
      declared.set(kind, codes)
    }
    return codes
  }
  const kindLabel = (kind: unknown): string => (codesOf(kind) === undefined ? OTHER : (kind as string))
  const codeLabel = (kind: unknown, code: unknown): string | undefined => {
    if (code === null || code === undefined) return undefined
    if (typeof code !== 'string') return OTHER
    return BUILT_IN_CODES.has(code) || codesOf(kind)?.has(code) === true ? code : OTHER
  }

  const subscriptions: [string, (message: unknown) => void][] = [
    [
      jobEnqueueChannel.name as string,
      (message) => {
        const m = message as JobEnqueueMessage
        if (m.runnerId === runnerId && Number.isSafeInteger(m.count) && m.count > 0) enqueued.inc({ kind: kindLabel(m.kind) }, m.count)
      },
    ],
    [
      jobStartChannel.name as string,
      (message) => {
        const m = message as JobStartMessage
        if (m.runnerId !== runnerId) return
        const kind = kindLabel(m.kind)
        started.inc({ kind })
        const wait = seconds(m.waitMs)
        if (wait !== undefined) queueWait.observe({ kind }, wait)
      },
    ],
    [
      jobEndChannel.name as string,
      (message) => {
        const m = message as JobEndMessage
        if (m.runnerId !== runnerId) return
        const kind = kindLabel(m.kind)
        const status = END_STATUSES.has(m.status) ? m.status : OTHER
        const code = codeLabel(m.kind, m.code)
        finished.inc(code === undefined ? { kind, status } : { kind, status, code })
        if (status === 'retry') retries.inc({ kind })
        if (m.code === CODE_TIMEOUT) timeouts.inc({ kind })
        const duration = seconds(m.durationMs)
        if (duration !== undefined) runDuration.observe({ kind }, duration)
      },
    ],
    [
      claimErrorChannel.name as string,
      (message) => {
        const m = message as ClaimErrorMessage
        if (m.runnerId === runnerId) databaseErrors.inc({ operation: 'claim', code: databaseCode(m.error), transient: String(m.transient === true) })
      },
    ],
    [
      databaseErrorChannel.name as string,
      (message) => {
        const m = message as DatabaseErrorMessage
        if (m.runnerId !== runnerId) return
        databaseErrors.inc({ operation: OPERATIONS.has(m.operation) ? m.operation : OTHER, code: databaseCode(m.error), transient: String(m.transient === true) })
      },
    ],
  ]
  for (const [name, listener] of subscriptions) diagnostics.subscribe(name, listener)

  let closed = false
  const close = () => {
    if (closed) return
    closed = true
    for (const [name, listener] of subscriptions) diagnostics.unsubscribe(name, listener)
    for (const name of names) registry.removeSingleMetric(prefix + name)
  }
  return { registry, close, [Symbol.dispose]: close }
}

/**
 * Registers the process's metrics in `registry`: prom-client's default
 * metrics (CPU time, resident and heap memory, open file descriptors,
 * event loop lag and utilisation, garbage collection, active handles and
 * requests by type, Node.js's version, the start time), less any that
 * Prometheus's own linter (`promtool check metrics`) refuses. prom-client
 * 15 names three gauges with the `_total` suffix Prometheus keeps for
 * counters (`nodejs_active_handles_total`, `nodejs_active_requests_total`,
 * `nodejs_active_resources_total`): they are left out, and their totals
 * are the sums of the per-type gauges that stay (`nodejs_active_handles`,
 * `nodejs_active_requests`, `nodejs_active_resources`, labelled by
 * `type`). Call it once per registry (prom-client refuses a metric
 * registered twice); `prefix` starts every name, as prom-client's option
 * does. Returns the names registered.
 */
export function collectProcessMetrics(registry: Registry, options: { readonly prefix?: string } = {}): string[] {
  if (registry === null || typeof registry !== 'object' || typeof registry.registerMetric !== 'function' || typeof registry.getMetricsAsArray !== 'function') {
    throw new ConfigError('collectProcessMetrics: registry must be a prom-client Registry')
  }
  const { prefix = '' } = optionsObject(options, ['prefix'], 'collectProcessMetrics')
  if (typeof prefix !== 'string' || !/^([a-zA-Z_:][a-zA-Z0-9_:]*)?$/.test(prefix)) {
    throw new ConfigError('collectProcessMetrics: prefix must be empty or start a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)')
  }
  const before = new Set(registry.getMetricsAsArray().map((m) => m.name))
  collectDefaultMetrics({ register: registry, prefix })
  const added = registry.getMetricsAsArray().filter((m) => !before.has(m.name))
  const kept: string[] = []
  for (const metric of added) {
    // Only a counter's name may end in _total (promtool: "non-counter metrics should not have _total suffix").
    if (metric.name.endsWith('_total') && !(metric instanceof Counter)) registry.removeSingleMetric(metric.name)
    else kept.push(metric.name)
  }
  return kept
}

/** What one scrape reports of rate limits: each limit's state, and each cooldown's end (epoch ms) by its label. */
interface RateSnapshot {
  readonly limits: readonly RateLimitState[]
  readonly cooldowns: ReadonlyMap<string, number>
}

/**
 * Reads the runner's rate limits and the cooldowns in force, and gives
 * each cooldown a label of bounded cardinality that names no scope: a
 * rate limit's key or a kind's name as it is, a per-scope bucket
 * (`<kind>@<scope>` of a per-scope limit) as `<kind>@*`, anything else
 * (a key a handler chose) as `other`; several cooldowns under one label
 * report the latest end.
 */
async function readRates(runner: Runner): Promise<RateSnapshot> {
  const [limits, cooldowns] = await Promise.all([runner.rateLimits(), runner.cooldowns()])
  const named = new Set<string>(runner.kinds().map((kind) => kind.name))
  const perScope: string[] = []
  for (const state of limits) {
    if (state.perScope) perScope.push(...state.kinds)
    else named.add(state.key)
  }
  // The longest kind first: its buckets' names begin with any shorter kind's that is a prefix of it.
  perScope.sort((a, b) => b.length - a.length)
  const labelled = new Map<string, number>()
  for (const { key, until } of cooldowns) {
    const kind = named.has(key) ? undefined : perScope.find((k) => key.startsWith(`${k}@`))
    const label = named.has(key) ? key : kind !== undefined ? `${kind}@*` : OTHER
    labelled.set(label, Math.max(labelled.get(label) ?? 0, until))
  }
  return { limits, cooldowns: labelled }
}

/** A database error code as a label: its own form (SQLITE_BUSY, a SQLSTATE, connection_lost), or `other`. */
function databaseCode(code: unknown): string {
  return typeof code === 'string' && /^[A-Za-z0-9_]{1,64}$/.test(code) ? code : OTHER
}

/** Milliseconds as seconds for a histogram; undefined for anything but a finite number >= 0. */
function seconds(ms: unknown): number | undefined {
  return typeof ms === 'number' && Number.isFinite(ms) && ms >= 0 ? ms / 1000 : undefined
}

/** Histogram buckets as given (finite, positive, increasing), or the defaults. */
function bucketsOf(name: string, buckets: readonly number[] | undefined): readonly number[] {
  if (buckets === undefined) return DEFAULT_BUCKETS
  const ok =
    Array.isArray(buckets) &&
    buckets.length > 0 &&
    buckets.length <= 100 &&
    buckets.every((b, i) => typeof b === 'number' && Number.isFinite(b) && b > 0 && (i === 0 || b > (buckets[i - 1] as number)))
  if (!ok) throw new ConfigError(`createMetrics: ${name} must be 1 to 100 finite numbers > 0 (seconds), increasing`)
  return buckets
}
