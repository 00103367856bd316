/**
 * Every error jobtable throws is a JobtableError with a stable `code`, so
 * callers branch on the code rather than on message text. Messages name
 * the kind, the field path or the database error code; they never quote a
 * payload, a result, or a handler's error text.
 */
export class JobtableError extends Error {
  /** A stable, machine-readable code, such as `unknown_kind`. */
  readonly code: string

  constructor(code: string, message: string) {
    super(message)
    this.code = code
    this.name = new.target.name
  }
}

/** Construction options were missing or invalid. */
export class ConfigError extends JobtableError {
  constructor(message: string) {
    super('invalid_config', `jobtable: ${message}`)
  }
}

/** A kind could not be registered: an empty kind, a missing handler, a duplicate, a bad failure code. */
export class RegistrationError extends JobtableError {
  constructor(kind: string, message: string) {
    super('invalid_registration', `jobtable: register ${JSON.stringify(kind)}: ${message}`)
  }
}

/** The runner was used in a state that does not allow it: a second start, a registration after start. */
export class RunnerStateError extends JobtableError {
  constructor(message: string) {
    super('invalid_state', `jobtable: ${message}`)
  }
}

/** Enqueue named a kind that has no registered handler. Nothing was stored. */
export class UnknownKindError extends JobtableError {
  /** The kind that is not registered. */
  readonly kind: string
  constructor(kind: string) {
    super('unknown_kind', `jobtable: unknown job kind ${JSON.stringify(kind)}`)
    this.kind = kind
  }
}

/** One reason a payload was refused: where in the payload, and what is wrong there (never the value). */
export interface PayloadIssue {
  /** Dotted path of the failing field; empty for the payload itself. */
  readonly path: string
  /**
   * What is wrong there, in words that never quote the value: `expected
   * <type>` (`expected string`, `expected <=5`) when the validator names
   * what it expected in a short plain form, `unknown field`, `invalid
   * value`, or jobtable's own (`payload is not JSON`).
   */
  readonly message: string
}

/** A payload does not fit its kind's schema, or is not JSON. Nothing was stored. */
export class InvalidPayloadError extends JobtableError {
  /** Which fields failed. Paths only, never values. */
  readonly issues: readonly PayloadIssue[]
  readonly kind: string
  /** `call` names the call and the job in a batch (`enqueueMany: job 3`), when there is one. */
  constructor(kind: string, issues: readonly PayloadIssue[], call?: string) {
    const where = issues.map((i) => i.path || '(payload)').join(', ')
    super('invalid_payload', `jobtable: ${call === undefined ? '' : `${call}: `}payload of ${JSON.stringify(kind)} does not fit its schema at ${where}`)
    this.kind = kind
    this.issues = issues
  }
}

/** No job has the id asked for. */
export class JobNotFoundError extends JobtableError {
  constructor() {
    super('not_found', 'jobtable: job not found')
  }
}

/** An argument of a call (a scope, a page size, a status filter) is out of its range. */
export class InvalidArgumentError extends JobtableError {
  constructor(message: string) {
    super('invalid_argument', `jobtable: ${message}`)
  }
}

/** A list cursor was not one jobtable made. */
export class InvalidCursorError extends JobtableError {
  constructor() {
    super('invalid_cursor', 'jobtable: the cursor is not one this API gave')
  }
}

/** A write was refused because the job is no longer running under this worker's claim. */
export class JobNotRunningError extends JobtableError {
  constructor(what: string) {
    super('job_not_running', `jobtable: ${what}: the job is not running`)
  }
}

/** A partial or final result could not be made into one JSON value by its kind's projection. */
export class ResultNotPublicError extends JobtableError {
  constructor() {
    super('result_not_public', 'jobtable: result has no valid public JSON')
  }
}

/**
 * A database operation failed. `transient` says whether trying again can
 * succeed (a busy lock, a dropped connection) or never will (a corrupt file,
 * a value the column refuses). The message carries the database's error
 * code only: database messages can quote the values being written.
 */
export class DatabaseError extends JobtableError {
  /** The database's own error code, e.g. `SQLITE_BUSY` or a PostgreSQL SQLSTATE. */
  readonly dbCode: string
  /** Whether retrying the same operation can succeed. */
  readonly transient: boolean
  constructor(operation: string, dbCode: string, transient: boolean) {
    super('database_error', `jobtable: ${operation}: database error ${dbCode}`)
    this.dbCode = dbCode
    this.transient = transient
  }
}

/**
 * The database's schema is newer than this jobtable and outside its
 * window: a migration since this release changed what it reads or
 * writes. The database is left untouched.
 */
export class SchemaVersionError extends JobtableError {
  /** The database's schema version. */
  readonly found: number
  /** The newest schema version this jobtable knows. */
  readonly supported: number
  /** The oldest jobtable schema version that runs on the database's schema (as found when known). */
  readonly compatibleFrom: number
  constructor(found: number, supported: number, compatibleFrom = found) {
    super(
      'schema_too_new',
      `jobtable: the database has schema version ${found}, which runs with jobtable code of schema version ${compatibleFrom} or newer; ` +
        `this jobtable has schema version ${supported}: deploy a jobtable release of schema version ${compatibleFrom} or newer here`,
    )
    this.found = found
    this.supported = supported
    this.compatibleFrom = compatibleFrom
  }
}

/**
 * The database's schema is older than this jobtable, and the driver was
 * told not to migrate it (`migrate: 'verify'`): apply the migrations
 * first (`jobtable migrate`, or `jobtable migrate --sql` through your own
 * migration tool). The database is left untouched.
 */
export class SchemaBehindError extends JobtableError {
  /** The database's schema version (0: no jobtable tables). */
  readonly found: number
  /** This jobtable's schema version. */
  readonly expected: number
  constructor(found: number, expected: number) {
    super(
      'schema_behind',
      `jobtable: the database has schema version ${found}, older than the ${expected} this jobtable needs, and migrate is 'verify': ` +
        `apply migrations ${found + 1} to ${expected} first (jobtable migrate, or jobtable migrate --sql --from ${found} through your migration tool)`,
    )
    this.found = found
    this.expected = expected
  }
}

/**
 * The mark every JobFailure carries, from whichever copy of jobtable made
 * it: a registered symbol is the same in every copy and every realm.
 */
const JOB_FAILURE_BRAND = Symbol.for('jobtable.JobFailure')

/**
 * Thrown by a handler to fail its job with a code the household may see.
 * The code must be one the kind declared at registration; any other code
 * fails the job with `internal_error`. It carries no message of its own:
 * only the code is ever stored.
 *
 * With the codes as a type argument a typo does not compile:
 * `new JobFailure<'no_recipe_found'>('no_recipe_found')`, or
 * `new JobFailure<Codes>(code)` with the kind's declared codes (a
 * handler's `fail(code)` and a definition's `failure(code)` are typed by
 * the kind). Without one any string compiles, as it would from
 * JavaScript: the kind's declared codes are checked when the job fails,
 * and any other code fails it with `internal_error`.
 *
 * `thrown instanceof JobFailure` holds for a JobFailure made by another
 * copy of jobtable too (a globally installed command loading a project's
 * kinds module): it checks the brand, not the prototype. A subclass's
 * `instanceof` keeps its ordinary prototype check.
 */
export class JobFailure<Code extends string = string> extends Error {
  readonly code: string
  constructor(code: NoInfer<Code>) {
    super(`jobtable: failure ${code}`)
    this.code = code
    this.name = 'JobFailure'
  }

  /** Whether value is a JobFailure of any copy of jobtable (or, for a subclass, an instance of that subclass). */
  static override [Symbol.hasInstance]<T>(this: abstract new (...args: never) => T, value: unknown): value is T {
    if ((this as unknown) !== JobFailure) return Function.prototype[Symbol.hasInstance].call(this, value)
    return (typeof value === 'object' || typeof value === 'function') && value !== null && (value as { [JOB_FAILURE_BRAND]?: unknown })[JOB_FAILURE_BRAND] === true
  }
}
// On the prototype, not enumerable: it shows in no JSON and no Object.keys of a failure.
Object.defineProperty(JobFailure.prototype, JOB_FAILURE_BRAND, { value: true, enumerable: false, writable: false, configurable: false })

/** The mark of a JobSnooze, from whichever copy of jobtable made it (as JOB_FAILURE_BRAND). */
const JOB_SNOOZE_BRAND = Symbol.for('jobtable.JobSnooze')

/**
 * Thrown by `job.snooze(ms)`: ends the job's attempt with "run me again in
 * `ms` milliseconds" (a provider's rate limit), without using up an
 * attempt. Recognized across copies of jobtable, as JobFailure is.
 */
export class JobSnooze extends Error {
  readonly delayMs: number
  constructor(delayMs: number) {
    super('jobtable: snooze')
    this.delayMs = delayMs
    this.name = 'JobSnooze'
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return (typeof value === 'object' || typeof value === 'function') && value !== null && (value as { [JOB_SNOOZE_BRAND]?: unknown })[JOB_SNOOZE_BRAND] === true
  }
}
Object.defineProperty(JobSnooze.prototype, JOB_SNOOZE_BRAND, { value: true, enumerable: false, writable: false, configurable: false })

/** The mark of a JobRateLimited, from whichever copy of jobtable made it (as JOB_FAILURE_BRAND). */
const JOB_RATE_LIMITED_BRAND = Symbol.for('jobtable.JobRateLimited')

/**
 * Thrown by `job.rateLimited(untilOrMs, { key })`: ends the job's attempt
 * as a snooze until `until` (its attempt given back) and records a
 * cooldown of `key` (default: the job's rate bucket, or its kind's name)
 * until then, so that no worker of any process starts a job of that key
 * before the provider's reset. `until` is read when the runner records the
 * attempt: a Date; a number >= 1e11 is epoch milliseconds; a smaller
 * number >= 0 is a delay from then. Anything else (NaN, a negative number,
 * an invalid Date, a bad key, an unknown option) fails the job with
 * `internal_error`. Recognized across copies of jobtable, as JobFailure is.
 */
export class JobRateLimited extends Error {
  /** As given: a Date, epoch milliseconds, or a delay in milliseconds. */
  readonly until: Date | number
  /** The options as given (`{ key? }`); checked when the runner records the attempt. */
  readonly options: { readonly key?: string } | undefined
  constructor(until: Date | number, options?: { readonly key?: string }) {
    super('jobtable: rate limited')
    this.until = until
    this.options = options
    this.name = 'JobRateLimited'
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    return (typeof value === 'object' || typeof value === 'function') && value !== null && (value as { [JOB_RATE_LIMITED_BRAND]?: unknown })[JOB_RATE_LIMITED_BRAND] === true
  }
}
Object.defineProperty(JobRateLimited.prototype, JOB_RATE_LIMITED_BRAND, { value: true, enumerable: false, writable: false, configurable: false })
