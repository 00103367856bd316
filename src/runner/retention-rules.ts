import { ConfigError, InvalidArgumentError } from '../errors.js'
import { TERMINAL_STATUSES, type TerminalStatus } from '../job.js'
import { optionsObject } from '../options.js'

/** How long terminal jobs are kept unless the runner's `retention` says otherwise: 7 days. */
export const DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000

/**
 * How often a started runner prunes unless `retention.intervalMs` says
 * otherwise: once a minute. Ages are days, so a minute late costs
 * nothing; a pass over a table with nothing to delete is one read of the
 * kinds and one indexed statement per kind; and a pass deletes about a
 * minute's worth of finished jobs, a few batches at most, so it never
 * runs long.
 */
export const DEFAULT_PRUNE_INTERVAL_MS = 60_000

/** The longest interval a timer takes: Node.js runs a longer one after 1 ms. */
const MAX_INTERVAL_MS = 2 ** 31 - 1

/** How long a terminal job is kept: milliseconds after it finished, or `false` to keep it for good. */
export type RetentionAge = number | false

/** Ages per terminal status; a status left out takes the age of the level above. */
export type RetentionByStatus = { readonly [S in TerminalStatus]?: RetentionAge }

/** One kind's own ages, ahead of the runner-wide ones. */
export interface KindRetention {
  /** The age of this kind's terminal jobs in every status it does not list in `byStatus`. */
  readonly maxAgeMs?: RetentionAge
  readonly byStatus?: RetentionByStatus
}

/**
 * How long a started runner keeps terminal jobs (succeeded, failed,
 * cancelled) before its maintenance deletes them, counted from when each
 * finished. The age of a job of kind K in status S is the first given of
 * `byKind[K].byStatus[S]`, `byKind[K].maxAgeMs`, `byStatus[S]`,
 * `maxAgeMs`; `false` at any level keeps such jobs. A kind named in
 * `byKind` need not be registered in this process.
 *
 * Retention is a setting of the whole deployment: every started runner on
 * the database prunes by its own rules, so the shortest age any of them
 * has for a job is the one that holds. Give every process the same.
 * Ages are read by this runner's clock against finish times written by
 * the clock of whichever runner finished each job: runners whose `clock`
 * options disagree by days (a test's) prune each other's jobs early or
 * late.
 */
export interface RetentionOptions {
  /** The age of every terminal job no other rule names. Default 604800000 (7 days). */
  readonly maxAgeMs?: RetentionAge
  /** Ages per status, for every kind without one of its own: `{ failed: 30 * 86_400_000 }`. */
  readonly byStatus?: RetentionByStatus
  /** Ages per kind, by kind name: `{ 'mail.send': { maxAgeMs: 86_400_000 } }`. */
  readonly byKind?: { readonly [kind: string]: KindRetention }
  /** How often the runner prunes, in ms of real time (timers do not follow the `clock` option). Default 60000; at most 2147483647. */
  readonly intervalMs?: number
}

/** What `runner.prune(options)` deletes at once: terminal jobs that finished more than `olderThanMs` ago. */
export interface PruneOptions {
  /** Milliseconds since the job finished, by the runner's clock; 0 deletes every terminal job finished before now. Required. */
  readonly olderThanMs: number
  /** Only jobs in these terminal statuses. Default all three. */
  readonly statuses?: readonly TerminalStatus[]
  /** Only jobs of these kinds (registered here or not). Default every kind. */
  readonly kinds?: readonly string[]
}

/** A group of a kind's statuses whose terminal jobs go at the same age. */
export interface PruneGroup {
  readonly statuses: readonly TerminalStatus[]
  readonly maxAgeMs: number
}

/** What a prune deletes, kind by kind. */
export interface PruneRules {
  /** The kinds to visit; undefined for every kind that has terminal jobs. */
  readonly kinds?: readonly string[]
  /** The statuses of `kind` to prune, grouped by age; none for a kind kept whole. */
  groups(kind: string): readonly PruneGroup[]
}

/** A runner's retention, once validated: its rules and how often it prunes. */
export interface RetentionConfig {
  readonly rules: PruneRules
  readonly intervalMs: number
}

const RETENTION_KEYS = ['maxAgeMs', 'byStatus', 'byKind', 'intervalMs'] as const
const KIND_KEYS = ['maxAgeMs', 'byStatus'] as const

/**
 * Validates the runner's `retention` option: null for `false` (this
 * process never prunes), else its rules. Throws ConfigError naming the
 * key at fault for an unknown key or status, an age that is not an
 * integer >= 0 or false, a kind name out of bounds, or a bad interval.
 */
export function retentionConfig(value: RetentionOptions | false | undefined): RetentionConfig | null {
  if (value === false) return null
  const where = 'Runner options: retention'
  const { maxAgeMs = DEFAULT_RETENTION_MS, byStatus, byKind, intervalMs = DEFAULT_PRUNE_INTERVAL_MS } = optionsObject(value, RETENTION_KEYS, where)
  checkAge('retention.maxAgeMs', maxAgeMs)
  const statuses = statusAges('retention.byStatus', byStatus)
  if (typeof intervalMs !== 'number' || !Number.isInteger(intervalMs) || intervalMs < 1 || intervalMs > MAX_INTERVAL_MS) {
    throw new ConfigError(`retention.intervalMs must be an integer from 1 to ${MAX_INTERVAL_MS} (milliseconds)`)
  }
  const rest = groupByAge((s) => statuses[s] ?? maxAgeMs)
  const kinds = new Map<string, readonly PruneGroup[]>()
  if (byKind !== undefined) {
    if (byKind === null || typeof byKind !== 'object' || Array.isArray(byKind)) throw new ConfigError('retention.byKind must be an object of kind names')
    for (const [kind, rule] of Object.entries(byKind)) {
      const at = `retention.byKind[${JSON.stringify(kind)}]`
      if (kind.length === 0 || kind.length > 256) throw new ConfigError(`retention.byKind: a kind name must be 1 to 256 characters, got ${kind.length}`)
      if (rule === undefined || rule === null || typeof rule !== 'object' || Array.isArray(rule)) throw new ConfigError(`${at} must be an object { maxAgeMs, byStatus }`)
      const own = optionsObject(rule, KIND_KEYS, at)
      if (own.maxAgeMs !== undefined) checkAge(`${at}.maxAgeMs`, own.maxAgeMs)
      const ownStatuses = statusAges(`${at}.byStatus`, own.byStatus)
      kinds.set(kind, groupByAge((s) => ownStatuses[s] ?? own.maxAgeMs ?? statuses[s] ?? maxAgeMs))
    }
  }
  return { rules: { groups: (kind) => kinds.get(kind) ?? rest }, intervalMs }
}

/** Validates the options of `runner.prune`, throwing InvalidArgumentError naming the key at fault. */
export function pruneRules(options: PruneOptions): PruneRules {
  if (options === undefined || options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new InvalidArgumentError('prune: options must be an object { olderThanMs, statuses?, kinds? }')
  }
  const { olderThanMs, statuses, kinds } = optionsObject(options, ['olderThanMs', 'statuses', 'kinds'], 'prune', 'argument')
  if (typeof olderThanMs !== 'number' || !Number.isSafeInteger(olderThanMs) || olderThanMs < 0) {
    throw new InvalidArgumentError('prune: olderThanMs must be an integer >= 0 (milliseconds)')
  }
  if (statuses !== undefined) {
    if (!Array.isArray(statuses) || statuses.length === 0) throw new InvalidArgumentError(`prune: statuses must be a non-empty array of ${TERMINAL_STATUSES.join(', ')}`)
    for (const s of statuses) {
      if (!TERMINAL_STATUSES.includes(s)) throw new InvalidArgumentError(`prune: statuses: ${JSON.stringify(s)} is not a terminal status (${TERMINAL_STATUSES.join(', ')})`)
    }
  }
  if (kinds !== undefined) {
    if (!Array.isArray(kinds) || kinds.length === 0) throw new InvalidArgumentError('prune: kinds must be a non-empty array of kind names')
    for (const k of kinds) {
      if (typeof k !== 'string' || k.length === 0 || k.length > 256) throw new InvalidArgumentError('prune: kinds: each must be a string of 1 to 256 characters')
    }
  }
  const group: readonly PruneGroup[] = [{ statuses: statuses === undefined ? TERMINAL_STATUSES : [...new Set(statuses)], maxAgeMs: olderThanMs }]
  return { ...(kinds === undefined ? {} : { kinds: [...new Set(kinds)] }), groups: () => group }
}

function checkAge(key: string, value: unknown): asserts value is RetentionAge {
  if (value === false) return
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new ConfigError(`${key} must be an integer >= 0 (milliseconds) or false`)
}

/** A byStatus object, validated: unknown keys (a live status such as `queued` among them) are refused. */
function statusAges(key: string, value: RetentionByStatus | undefined): RetentionByStatus {
  if (value === undefined) return {}
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new ConfigError(`${key} must be an object of terminal statuses (${TERMINAL_STATUSES.join(', ')})`)
  const checked = optionsObject(value, TERMINAL_STATUSES, key)
  for (const s of TERMINAL_STATUSES) if (checked[s] !== undefined) checkAge(`${key}.${s}`, checked[s])
  return checked
}

/** The terminal statuses grouped by the age `ageOf` gives each, leaving out those kept (false). */
function groupByAge(ageOf: (status: TerminalStatus) => RetentionAge): readonly PruneGroup[] {
  const byAge = new Map<number, TerminalStatus[]>()
  for (const s of TERMINAL_STATUSES) {
    const age = ageOf(s)
    if (age === false) continue
    const group = byAge.get(age)
    if (group === undefined) byAge.set(age, [s])
    else group.push(s)
  }
  return [...byAge].map(([maxAgeMs, statuses]) => ({ statuses, maxAgeMs }))
}
