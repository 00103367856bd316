import type { DriverAdmin } from '../driver.js'
import { InvalidArgumentError, RegistrationError } from '../errors.js'
import { TERMINAL_STATUSES, type TerminalStatus } from '../job.js'
import type { RegisteredKind } from '../kind.js'
import { optionsObject } from '../options.js'

/*
 * The runner's side of rate limits that is not the claim (the drivers
 * apply the rules; src/rate-limit.ts is their shared part): the checks a
 * registration makes against the kinds already known, and what an
 * operator reads (rateLimits, activity).
 */

/** One rate limit's bucket as `runner.rateLimits()` reports it. */
export interface RateLimitState {
  /** The bucket: the kind's name, the shared name, or `<kind>@*` for a per-scope limit. */
  readonly key: string
  /** The kinds registered here drawing on it, sorted. */
  readonly kinds: string[]
  readonly limit: number
  readonly periodMs: number
  /** One bucket per owner scope (`key: 'scope'`). */
  readonly perScope: boolean
  /** Claims in the window now; per scope: the busiest scope's. */
  readonly used: number
  /** When the oldest claim in the window leaves it (epoch ms), null when none is in it; per scope: the busiest scope's. */
  readonly resetAt: number | null
  /** Per scope only: each scope with claims in the window, sorted by scope. */
  readonly scopes?: { scope: string; used: number; resetAt: number | null }[]
  /** The end of a cooldown in force on this key (epoch ms), or null; per scope: the latest of its scopes' cooldowns. */
  readonly cooldownUntil: number | null
}

/** Options of `runner.activity`. Unknown keys are refused (InvalidArgumentError). */
export interface ActivityOptions {
  /** How many minutes back: an integer from 1 to 1440. Default 60. */
  readonly minutes?: number
  /** Only this scope's jobs (null: jobs enqueued without one). Default: every scope. */
  readonly scope?: string | null
}

/** What `runner.activity()` reports: the dashboard's chart of the last hour. */
export interface Activity {
  /** The window's start: the start of the minute `minutes` ago (epoch ms, a multiple of 60,000). */
  readonly since: number
  readonly minutes: number
  /** Jobs finished per minute (its start, epoch ms) and status, from `since`, oldest minute first; a minute and status with none is left out. */
  readonly finished: { minute: number; status: TerminalStatus; count: number }[]
  /** Jobs queued now, by kind, sorted by kind; a kind with none is left out. */
  readonly queued: { kind: string; count: number }[]
}

const ACTIVITY_KEYS = ['minutes', 'scope'] as const
const MINUTE_MS = 60_000

/**
 * Refuses a kind whose rate-limit bucket would mix with another's: a
 * shared bucket whose kinds disagree on limit or periodMs, a shared
 * bucket (or a per-scope bucket, `<kind>@<scope>`) that is also a
 * registered kind's name, for a kind's name is its cooldown key.
 */
export function checkClaimRules(kind: RegisteredKind, known: ReadonlyMap<string, RegisteredKind>): void {
  const { name, rate } = kind
  for (const other of known.values()) {
    if (other.rate?.bucket === name && other.name !== name) {
      throw new RegistrationError(name, `the kind ${JSON.stringify(other.name)} names ${JSON.stringify(name)} as its shared rateLimit.key: a shared bucket may not be a kind's name`)
    }
    if (other.rate !== null && other.rate.bucket === null && name.startsWith(`${other.name}@`)) {
      throw new RegistrationError(name, `the name is one of the per-scope rate-limit buckets of ${JSON.stringify(other.name)} (${other.name}@<scope>)`)
    }
    if (rate !== null && rate.bucket === null && other.name.startsWith(`${name}@`)) {
      throw new RegistrationError(name, `a per-scope rate limit's buckets (${name}@<scope>) would include the kind ${JSON.stringify(other.name)}`)
    }
  }
  const bucket = rate?.bucket
  if (rate === null || bucket === null || bucket === undefined || bucket === name) return
  if (known.has(bucket)) throw new RegistrationError(name, `rateLimit.key ${JSON.stringify(bucket)} is the name of another registered kind: a shared bucket may not be a kind's name`)
  for (const other of known.values()) {
    if (other.rate?.bucket !== bucket || (other.rate.limit === rate.limit && other.rate.periodMs === rate.periodMs)) continue
    throw new RegistrationError(
      name,
      `rateLimit.key ${JSON.stringify(bucket)} is shared with ${JSON.stringify(other.name)}, whose limit is ${other.rate.limit} per ${other.rate.periodMs} ms: kinds sharing a bucket must give the same limit and periodMs`,
    )
  }
}

/** A bucket as rateLimits reads it: the window asked of the driver, and the kinds drawing on it. */
interface Bucket {
  readonly key: string
  /** What rateUsage takes: the bucket's name, or the kind's for a per-scope limit. */
  readonly bucket: string
  readonly perScope: boolean
  readonly limit: number
  readonly periodMs: number
  readonly kinds: string[]
}

/** The state of every rate-limit bucket of `kinds` at `now`, sorted by key (see RateLimitState). */
export async function readRateLimits(driver: Pick<DriverAdmin, 'rateUsage' | 'cooldownList'>, kinds: readonly RegisteredKind[], now: number): Promise<RateLimitState[]> {
  const buckets = new Map<string, Bucket>()
  for (const { name, rate } of kinds) {
    if (rate === null) continue
    const perScope = rate.bucket === null
    const key = rate.bucket ?? `${name}@*`
    const bucket = buckets.get(key)
    if (bucket === undefined) buckets.set(key, { key, bucket: rate.bucket ?? name, perScope, limit: rate.limit, periodMs: rate.periodMs, kinds: [name] })
    else bucket.kinds.push(name)
  }
  if (buckets.size === 0) return []
  const windows = [...buckets.values()].map(({ bucket, periodMs, perScope }) => ({ bucket, periodMs, perScope }))
  const [uses, cooldowns] = await Promise.all([driver.rateUsage({ now, windows }), driver.cooldownList({ now })])
  const states: RateLimitState[] = []
  for (const b of buckets.values()) {
    const resetOf = (oldest: number | null) => (oldest === null ? null : Number(oldest) + b.periodMs)
    const base = { key: b.key, kinds: [...b.kinds].sort(), limit: b.limit, periodMs: b.periodMs, perScope: b.perScope }
    if (!b.perScope) {
      const use = uses.find((u) => u.bucket === b.bucket)
      const cooldown = cooldowns.find((c) => c.key === b.bucket)
      states.push({ ...base, used: Number(use?.used ?? 0), resetAt: resetOf(use?.oldest ?? null), cooldownUntil: cooldown === undefined ? null : Number(cooldown.until) })
      continue
    }
    // Per-scope buckets are `<kind>@<scope>`; registration keeps any other bucket or kind from starting so.
    const prefix = `${b.bucket}@`
    const scopes = uses
      .filter((u) => u.bucket.startsWith(prefix))
      .map((u) => ({ scope: u.bucket.slice(prefix.length), used: Number(u.used), resetAt: resetOf(u.oldest) }))
      .sort((x, y) => (x.scope < y.scope ? -1 : x.scope > y.scope ? 1 : 0))
    let busiest: (typeof scopes)[number] | undefined
    for (const s of scopes) {
      if (busiest === undefined || s.used > busiest.used || (s.used === busiest.used && (s.resetAt ?? Infinity) < (busiest.resetAt ?? Infinity))) busiest = s
    }
    let cooldownUntil: number | null = null
    for (const c of cooldowns) if (c.key.startsWith(prefix)) cooldownUntil = Math.max(cooldownUntil ?? Number.NEGATIVE_INFINITY, Number(c.until))
    states.push({ ...base, used: busiest?.used ?? 0, resetAt: busiest?.resetAt ?? null, scopes, cooldownUntil })
  }
  return states.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
}

/** What `runner.activity(options)` reports at `now` (see Activity); refuses unknown options and bad values. */
export async function readActivity(driver: Pick<DriverAdmin, 'jobActivity' | 'jobCounts'>, options: ActivityOptions | undefined, now: number): Promise<Activity> {
  const { minutes = 60, scope } = optionsObject(options, ACTIVITY_KEYS, 'activity', 'argument')
  if (typeof minutes !== 'number' || !Number.isInteger(minutes) || minutes < 1 || minutes > 1440) throw new InvalidArgumentError('activity: minutes must be an integer from 1 to 1440')
  if (scope !== undefined && scope !== null && typeof scope !== 'string') throw new InvalidArgumentError('activity: scope must be a string or null')
  const since = Math.floor((now - minutes * MINUTE_MS) / MINUTE_MS) * MINUTE_MS
  const [rows, counts] = await Promise.all([driver.jobActivity({ since, scope }), driver.jobCounts({ scope })])
  const finished = rows
    .map((r) => ({ minute: Number(r.minute), status: r.status, count: Number(r.count) }))
    .filter((r) => r.count > 0)
    .sort((a, b) => a.minute - b.minute || TERMINAL_STATUSES.indexOf(a.status) - TERMINAL_STATUSES.indexOf(b.status))
  const queued = counts
    .filter((c) => c.status === 'queued' && Number(c.count) > 0)
    .map((c) => ({ kind: c.kind, count: Number(c.count) }))
    .sort((a, b) => (a.kind < b.kind ? -1 : a.kind > b.kind ? 1 : 0))
  return { since, minutes, finished, queued }
}
