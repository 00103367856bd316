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

const MISSED: readonly MissedTicks[] = ['last', 'skip', 'all']

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
  /** The IANA time zone its fields are read in, e.g. `Europe/Paris`. Default `UTC`, the same on every machine. */
  readonly timezone?: string
  /** The payload of each tick's job, or a function of the tick's time that returns it; validated by the kind's schema. */
  readonly payload: In | ((tick: Date) => In)
  /** Enqueue options of each tick's job. */
  readonly options?: ScheduleEnqueueOptions
  /** Ticks missed while nothing ran: `last` (default), `skip` or `all` (see MissedTicks). */
  readonly missed?: MissedTicks
}

const DEFINITION_KEYS = ['cron', 'timezone', 'payload', 'options', 'missed'] as const

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

/** A declared schedule: its name, kind and definition, checked, with the cron it reads its ticks from. */
export class Schedule {
  readonly name: string
  readonly kind: string
  readonly payload: unknown
  readonly options: ScheduleEnqueueOptions | undefined
  readonly missed: MissedTicks
  readonly #cron: Cron

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
      this.#cron = new Cron(cron, { timezone, mode: '5-part' })
    } catch (err) {
      // croner's message names the field at fault; the pattern is configuration, not user data.
      throw new ConfigError(`schedule ${JSON.stringify(name)}: ${err instanceof Error ? err.message : 'invalid cron'}`)
    }
    if (this.#cron.nextRun(new Date(0)) === null) throw new ConfigError(`schedule ${JSON.stringify(name)}: cron ${JSON.stringify(cron)} never fires`)
    this.name = name
    this.kind = kind
    this.payload = payload
    this.options = options
    this.missed = missed
  }

  /** The latest tick at or before `now` (epoch ms), or null when there is none. */
  latest(now: number): number | null {
    return this.#cron.previousRuns(1, new Date(now + 1))[0]?.getTime() ?? null
  }

  /** The first tick after `after` (epoch ms), or null when there is none. */
  next(after: number): number | null {
    return this.#cron.nextRun(new Date(after))?.getTime() ?? null
  }

  /** The payload of the tick at `tick`. May throw: the application's function runs. */
  payloadAt(tick: number): unknown {
    return typeof this.payload === 'function' ? (this.payload as (tick: Date) => unknown)(new Date(tick)) : this.payload
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
