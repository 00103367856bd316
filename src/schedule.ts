import { Cron } from 'croner'
import { ConfigError } from './errors.js'
import { optionsObject } from './options.js'

/**
 * What a schedule does with the ticks that passed while no process ran
 * it (a deploy, an outage): `last` enqueues the latest of them once (a
 * nightly digest missed for three nights runs once), `skip` enqueues
 * none and waits for the next tick, `all` enqueues every one, oldest
 * first, up to CATCH_UP_MAX per pass of the service.
 */
export type MissedTicks = 'last' | 'skip' | 'all'

/** Every MissedTicks policy. */
export const MISSED: readonly MissedTicks[] = ['last', 'skip', 'all']

/** The enqueue options a schedule's jobs may have: every tick's job is due at its tick. */
export interface ScheduleEnqueueOptions {
  readonly scope?: string
  readonly priority?: number
  readonly timeoutMs?: number
  readonly uniqueKey?: string
}

const ENQUEUE_KEYS = ['scope', 'priority', 'timeoutMs', 'uniqueKey'] as const

/** A recurring job, declared on the runner with `runner.schedule(name, definition)`. Unknown keys are refused (ConfigError). */
export interface ScheduleDefinition<In = unknown> {
  /**
   * When it runs, in five-field cron (minute hour day-of-month month
   * day-of-week, e.g. `0 3 * * *` for 03:00 every day), read by croner.
   * Nicknames such as `@daily` are accepted; seconds are not.
   */
  readonly cron: string
  /**
   * The IANA time zone its fields are read in, e.g. `Europe/Paris`.
   * Default `UTC`, the same on every machine. On a daylight-saving change
   * each wall time the pattern names still runs once that day, whatever
   * the pattern: a time the change skips runs at the first instant after
   * the gap (times that land there together are one tick, one job), and
   * a time it repeats runs at its first occurrence only.
   */
  readonly timezone?: string
  /** The payload of each tick's job, or a function of the tick's time that returns it; validated by the kind's schema. */
  readonly payload: In | ((tick: Date) => In)
  /** Enqueue options of each tick's job. */
  readonly options?: ScheduleEnqueueOptions
  /** Ticks missed while nothing ran: `last` (default), `skip` or `all` (see MissedTicks). */
  readonly missed?: MissedTicks
}

const DEFINITION_KEYS = ['cron', 'timezone', 'payload', 'options', 'missed'] as const

/**
 * A recurring schedule as `runner.schedules()` lists it: what the runner
 * declared, with the last tick the database recorded and the next one.
 * Never its payload, nor its enqueue options (a payload may hold private
 * data).
 */
export interface ScheduleInfo {
  /** The schedule's name, shared by every process that declares it. */
  readonly name: string
  /** The kind of the jobs its ticks enqueue. */
  readonly kind: string
  /** Its five-field cron pattern, as declared (e.g. `0 3 * * *`, or a nickname such as `@daily`). */
  readonly cron: string
  /** The IANA time zone its pattern is read in (`UTC` unless declared). */
  readonly timezone: string
  /** What it does with ticks missed while nothing ran: `last`, `skip` or `all`. */
  readonly missed: MissedTicks
  /**
   * The last tick the database recorded for it, in epoch ms: the tick
   * whose job was enqueued last (or passed over, by its `missed` policy).
   * Null until a started runner has recorded it (a schedule starts with
   * its next tick).
   */
  readonly lastTickAt: number | null
  /** Its first tick after now by the runner's clock, in epoch ms, with the same daylight-saving rules as the ticks enqueued; null when its pattern names no later time. */
  readonly nextTickAt: number | null
}

/** The most missed ticks one pass of `missed: 'all'` enqueues; the next pass goes on at once. */
export const CATCH_UP_MAX = 100

/**
 * Under `missed: 'skip'`, a tick found later than this after its time is
 * counted as missed, not late: passes run at each tick, and at least every
 * poll interval, so a tick is found well within it unless nothing ran.
 */
export const SKIP_LATE_MS = 60_000

/** The longest a schedule name may be. */
const NAME_MAX = 256

/**
 * A declared schedule: its name, kind and definition, checked, with the
 * cron it reads its ticks from.
 *
 * Ticks are wall-clock times of the schedule's zone, each turned into one
 * instant, whatever the pattern (croner itself keeps this only for a
 * single fixed time such as `30 2 * * *`, and treats lists, ranges and
 * steps as intervals that skip a gap and run twice in an overlap):
 * - a time that does not exist that day (in a spring-forward gap) runs at
 *   the first instant after the gap, the gap's end;
 * - a time that occurs twice (in a fall-back overlap) runs once, at its
 *   first occurrence;
 * - a tick is an instant: named times that fall on one instant (02:00 and
 *   02:30 both moved to the end of a 02:00-03:00 gap, or moved onto a
 *   03:00 the pattern also names) are one tick and enqueue one job. The
 *   database records a schedule's last tick as an instant and moves it
 *   only forward, and the payload function receives that instant, so two
 *   jobs there would be one job twice.
 * So on every day each named time runs once, except that the times a gap
 * swallows share the one tick at its end; an every-N-minutes pattern
 * pauses during the repeated hour of a fall-back night.
 */
export class Schedule {
  readonly name: string
  readonly kind: string
  /** The cron pattern as declared. */
  readonly cron: string
  /** The IANA time zone its fields are read in. */
  readonly timezone: string
  readonly payload: unknown
  readonly options: ScheduleEnqueueOptions | undefined
  readonly missed: MissedTicks
  /** The pattern over wall-clock times, each written as the epoch ms of the same reading in UTC. */
  readonly #wall: Cron
  readonly #zone: Zone

  constructor(name: string, kind: string, definition: ScheduleDefinition) {
    if (typeof name !== 'string' || name.length === 0 || name.length > NAME_MAX || /[\u0000-\u001f\u007f]/.test(name)) {
      throw new ConfigError(`schedule name must be a non-empty string of at most ${NAME_MAX} characters, without control characters`)
    }
    if (definition === null || typeof definition !== 'object') throw new ConfigError(`schedule ${JSON.stringify(name)}: a definition object is required`)
    const { cron, timezone = 'UTC', payload, options, missed = 'last' } = optionsObject(definition, DEFINITION_KEYS, `schedule ${JSON.stringify(name)}`)
    if (typeof cron !== 'string') throw new ConfigError(`schedule ${JSON.stringify(name)}: cron must be a five-field cron string`)
    if (typeof timezone !== 'string' || !isTimeZone(timezone)) throw new ConfigError(`schedule ${JSON.stringify(name)}: timezone must be an IANA time zone name such as Europe/Paris`)
    if (!MISSED.includes(missed)) throw new ConfigError(`schedule ${JSON.stringify(name)}: missed must be one of ${MISSED.join(', ')}`)
    if (!('payload' in definition)) throw new ConfigError(`schedule ${JSON.stringify(name)}: payload is required (a value, or a function of the tick)`)
    if (options !== undefined) optionsObject(options, ENQUEUE_KEYS, `schedule ${JSON.stringify(name)} options`)
    try {
      // Read at offset 0, which has no daylight-saving change: every wall time the pattern names, none skipped or doubled; #zone places them.
      this.#wall = new Cron(cron, { utcOffset: 0, mode: '5-part' })
    } catch (err) {
      // croner's message names the field at fault; the pattern is configuration, not user data.
      throw new ConfigError(`schedule ${JSON.stringify(name)}: ${err instanceof Error ? err.message : 'invalid cron'}`)
    }
    if (this.#wall.nextRun(new Date(0)) === null) throw new ConfigError(`schedule ${JSON.stringify(name)}: cron ${JSON.stringify(cron)} never fires`)
    this.#zone = new Zone(timezone)
    this.name = name
    this.kind = kind
    this.cron = cron
    this.timezone = timezone
    this.payload = payload
    this.options = options
    this.missed = missed
  }

  /** The latest tick at or before `now` (epoch ms), or null when there is none. */
  latest(now: number): number | null {
    // Ticks keep the order of their wall times, so the latest is the one whose wall time comes just before the next tick's.
    const next = this.#nextWall(now)
    let wall = this.#wall.previousRuns(1, new Date(next ?? this.#zone.wallAt(now) + DAY_MS))[0]?.getTime()
    // Only without a next tick (croner's horizon): walk back to the first wall time placed at or before now.
    while (wall !== undefined && this.#zone.instantOf(wall) > now) wall = this.#wall.previousRuns(1, new Date(wall))[0]?.getTime()
    return wall === undefined ? null : this.#zone.instantOf(wall)
  }

  /** The first tick after `after` (epoch ms), or null when there is none. */
  next(after: number): number | null {
    const wall = this.#nextWall(after)
    return wall === null ? null : this.#zone.instantOf(wall)
  }

  /**
   * The first wall time the pattern names whose instant is after `after`.
   * It is never earlier than the reading at `after` (a repeated time is
   * placed at its first occurrence, a skipped one at the gap's end); from
   * there, the times whose instant is not after `after` are passed over:
   * in the second pass of a repeated hour those already run at their first
   * occurrence, and any placed on `after` itself (times a gap merged).
   */
  #nextWall(after: number): number | null {
    let wall = this.#wall.nextRun(new Date(this.#zone.wallAt(after)))?.getTime() ?? null
    while (wall !== null && this.#zone.instantOf(wall) <= after) wall = this.#wall.nextRun(new Date(wall))?.getTime() ?? null
    return wall
  }

  /** The payload of the tick at `tick`. May throw: the application's function runs. */
  payloadAt(tick: number): unknown {
    return typeof this.payload === 'function' ? (this.payload as (tick: Date) => unknown)(new Date(tick)) : this.payload
  }
}

const DAY_MS = 86_400_000

/**
 * Wall-clock times of one IANA zone, from the platform's Intl (as croner
 * reads them). A wall time is written as the epoch ms of the same reading
 * in UTC: 02:30 on 29 March 2026 in Paris is Date.UTC(2026, 2, 29, 2, 30).
 */
class Zone {
  readonly #format: Intl.DateTimeFormat

  constructor(timeZone: string) {
    this.#format = new Intl.DateTimeFormat('en-US', {
      timeZone,
      hourCycle: 'h23',
      year: 'numeric',
      month: 'numeric',
      day: 'numeric',
      hour: 'numeric',
      minute: 'numeric',
      second: 'numeric',
    })
  }

  /** The wall-clock time at `instant`. */
  wallAt(instant: number): number {
    const f: Record<string, number> = {}
    for (const part of this.#format.formatToParts(instant)) if (part.type !== 'literal') f[part.type] = Number(part.value)
    const ms = ((instant % 1000) + 1000) % 1000
    // Some ICU versions write midnight as hour 24 of the same day.
    return Date.UTC(f.year!, f.month! - 1, f.day!, f.hour! % 24, f.minute!, f.second!) + ms
  }

  /**
   * The instant of wall time `wall`: the first of its two occurrences in
   * a fall-back overlap, and for a time a spring-forward gap skips, the
   * first instant after the gap (whose wall time is the gap's end).
   */
  instantOf(wall: number): number {
    // The zone's offsets a day either side cover any change near `wall` (as Temporal's polyfill reads them).
    const before = this.#offsetAt(wall - DAY_MS)
    const after = this.#offsetAt(wall + DAY_MS)
    const early = wall - Math.max(before, after)
    const late = wall - Math.min(before, after)
    if (this.wallAt(early) === wall) return early
    if (this.wallAt(late) === wall) return late
    // In a gap: the wall time at `early` is before `wall`, at `late` after it, rising in between. Find where it jumps past.
    let lo = early
    let hi = late
    while (hi - lo > 1) {
      const mid = lo + Math.floor((hi - lo) / 2)
      if (this.wallAt(mid) > wall) hi = mid
      else lo = mid
    }
    return hi
  }

  #offsetAt(instant: number): number {
    return this.wallAt(instant) - instant
  }
}

function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: zone })
    return true
  } catch {
    return false
  }
}
