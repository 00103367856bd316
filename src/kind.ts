import type { StandardSchemaV1 } from '@standard-schema/spec'
import { type Cooldown, type KindRule, rateBucket, type RateRule } from './driver.js'
import { JobFailure, JobRateLimited, JobSnooze, RegistrationError } from './errors.js'
import { CODE_INTERNAL, CODE_TIMEOUT, FAILURE_CODE_PATTERN, RESERVED_CODES } from './job.js'
import { decodePayload, isThenable } from './payload.js'
import { publicJson } from './result.js'

/** What a handler receives beside its payload. */
export interface JobContext<R, Code extends string = string> {
  /** The job's id. */
  readonly id: string
  /** The job's kind. */
  readonly kind: string
  /**
   * This job's own signal: it aborts when the runner stops (and, with the
   * lifecycle features, when this job alone is cancelled or times out).
   * A handler that ends early because of it leaves its job to fail as
   * interrupted at the next start. It belongs to this job only, so what a
   * handler attaches to it is released with the job.
   */
  readonly signal: AbortSignal
  /**
   * Publishes a partial result, which `get()` returns while the job runs.
   * It goes through the kind's `result` projection, like the final result.
   * Rejects with JobNotRunningError once the job is no longer running.
   */
  publish(partial: R): Promise<void>
  /** Throws a JobFailure with a code the kind declared: `return ctx.fail('no_recipe_found')`. */
  fail(code: Code): never
  /**
   * Ends this attempt with "run me again in `ms` milliseconds" (a
   * provider's rate limit): the job goes back to the queue, scheduled,
   * and the attempt is given back. `return ctx.snooze(60_000)`.
   */
  snooze(ms: number): never
  /**
   * Ends this attempt because a provider said "not before `untilOrMs`" (a
   * 429 with its reset time): the job goes back to the queue due then,
   * its attempt given back, and a cooldown of `key` is recorded until then
   * in the same write, so no worker of any process on the database starts
   * a job of that key before it. `untilOrMs`: a Date; a number >= 1e11 is
   * epoch milliseconds; a smaller number >= 0 is a delay from now. `key`
   * defaults to the job's rate bucket (the kind's name for a kind without
   * `rateLimit`, its shared key, or `<kind>@<scope>` for a per-scope one).
   * An invalid time, key or option fails the job with `internal_error`.
   * `return job.rateLimited(new Date(resetAt))`.
   */
  rateLimited(untilOrMs: Date | number, options?: RateLimitedOptions): never
  /** The owner scope the job was enqueued under, or null. */
  readonly scope: string | null
  /** This claim's number: 1 on the first start, counting every start since (retries, requeues, snoozes). */
  readonly attempt: number
  /**
   * A signal for the handler's own last write (the one recording what the
   * job did): not aborted by stop, but bounded by FINAL_WRITE_TIMEOUT_MS.
   */
  finalWriteSignal(): AbortSignal
}

/** Runs one job: its return value is the final result; throwing fails the job. */
export type Handler<S extends StandardSchemaV1, R, Code extends string> = (
  payload: StandardSchemaV1.InferOutput<S>,
  ctx: JobContext<R, Code>,
) => Promise<R> | R

/**
 * What a kind is, without the code that runs it: the part a producer (a
 * web process that only enqueues) and a worker share, so it lives in a
 * module both import. Handed to `defineKind`.
 */
export interface KindOptions<S extends StandardSchemaV1, R, Code extends string> {
  /** The payload's schema, any Standard Schema (zod, valibot, arktype). Use a strict object schema; unknown fields are refused either way. */
  readonly payload: S
  /**
   * The public projection of a result: exactly what is stored and returned.
   * Its parameter's type is the handler's return type, so annotate it.
   * Default: no public result (null), so a private field can never leak by
   * omission.
   */
  readonly result?: (result: R) => unknown
  /** The failure codes the handler may throw with JobFailure, each matching `^[a-z][a-z0-9_]{0,63}$`. */
  readonly failures?: readonly Code[]
  /** Whether `POST /api/v1/jobs` may enqueue this kind. Default false: kinds are not exposed over HTTP. */
  readonly enqueueOverHttp?: boolean
  /**
   * Opt-in retries. Default none: a job has the single attempt of the
   * reference design. A job that fails with one of `codes` (declared
   * failure codes, and `internal_error` or `timeout` only if listed) while
   * it has attempts left goes back to the queue, scheduled after an
   * exponential backoff with jitter; its last attempt's failure is the
   * job's failure. Its codes are checked against `failures`, never added
   * to them (NoInfer): a typo here is a compile error, not a new code
   * that `fail` would then accept.
   */
  readonly retry?: RetryOptions<NoInfer<Code>>
  /**
   * Each start's deadline, in ms: at it the job's signal aborts, and the
   * job fails with `timeout` whatever its handler then does (retried only
   * if `retry.codes` lists `timeout`). A job's own `timeoutMs` overrides
   * it. Default: none.
   */
  readonly timeoutMs?: number
  /**
   * The handler may safely run again after a crash: a job its process left
   * running is queued again (using an attempt) instead of failing as
   * `interrupted by restart`, while it has attempts left (`retry.maxAttempts`,
   * default 3 for an idempotent kind). Default false: a handler starts at
   * most once.
   */
  readonly idempotent?: boolean
  /**
   * At most this many jobs of the kind run at once in the whole
   * deployment, across every process on the database (at most 2
   * `plan_week` at a time). Enforced in the claim itself. Jobs over the
   * limit wait; other kinds' jobs are claimed past them. Default: no limit.
   */
  readonly concurrency?: number
  /** At most this many jobs of the kind run at once per owner scope (one plan per household). Default: no limit. */
  readonly scopeConcurrency?: number
  /**
   * At most `limit` starts per `periodMs` (a sliding window), counted over
   * every process on the database in the claim itself: a job over the
   * limit stays queued, using no attempt, and the claim takes other
   * kinds' jobs past it. A start counts whether or not its handler
   * finishes. `key`: `'kind'` (default, one budget for the kind), `'scope'`
   * (one budget per owner scope), or a name several kinds share
   * (`'provider:openai'`). Default: no rate limit.
   */
  readonly rateLimit?: RateLimitOptions
  /**
   * `'scope'`: when several scopes have queued jobs of the kind, claims
   * take them in turn across scopes, within each priority, instead of
   * oldest first, so one scope's backlog does not hold up another's one
   * job. Default: oldest first.
   */
  readonly fairness?: 'scope'
}

/** A kind's rate limit: at most `limit` starts per `periodMs` in each of its buckets. */
export interface RateLimitOptions {
  /** Starts per window: an integer from 1 to 1000000. */
  readonly limit: number
  /** The window, in ms: an integer from 1 to 2592000000 (30 days). */
  readonly periodMs: number
  /**
   * Which budget a job draws on: `'kind'` (default: one per kind),
   * `'scope'` (one per owner scope, bucket `<kind>@<scope>`), or the name
   * of a bucket every kind naming it shares (1 to 200 characters, no `@`,
   * no control characters); kinds sharing one in a runner must give the
   * same limit and periodMs.
   */
  readonly key?: 'kind' | 'scope' | (string & {})
}

/** Options of `job.rateLimited`. */
export interface RateLimitedOptions {
  /** The cooldown's key: 1 to 1024 characters. Default: the job's rate bucket (see JobContext.rateLimited). */
  readonly key?: string
}

/**
 * A kind's rules for claims: how many jobs may run at once, in all and
 * per scope, its rate limit and its fair order (the driver's KindRule).
 */
export type KindLimit = KindRule

/** Retries of a kind: how many attempts in all, which failures, how long between them. */
export interface RetryOptions<Code extends string = string> {
  /** Attempts in all, the first included: an integer from 1 to 1000. */
  readonly maxAttempts: number
  /** The failure codes to retry: declared ones, and `internal_error` or `timeout`. Default: none (only crashes, for an idempotent kind). */
  readonly codes?: readonly (Code | typeof CODE_INTERNAL | typeof CODE_TIMEOUT)[]
  /**
   * The delay before attempt n+1: `baseMs * 2^(n-1)`, at most `maxMs`,
   * then a random half of it taken off (so retries of many jobs spread).
   * Defaults: baseMs 1000, maxMs 600000 (10 minutes).
   */
  readonly backoff?: { readonly baseMs?: number; readonly maxMs?: number }
}

/** A kind's options with its handler: the one-step form `runner.register(name, { ..., handler })` takes. */
export interface KindDefinition<S extends StandardSchemaV1, R, Code extends string> extends KindOptions<S, R, Code> {
  /** Runs one job. Its return value is the final result; throwing fails the job. */
  readonly handler: Handler<S, R, Code>
}

/**
 * A kind defined once, shared by producers and workers: its name, payload
 * schema, result projection and failure codes. Producers
 * `runner.register(kind)` it to enqueue; workers
 * `runner.register(kind, handler)` to run it. Types flow from it: the
 * payload a handle enqueues, the handler's payload and result, the codes
 * it may fail with.
 */
export interface KindDef<S extends StandardSchemaV1 = StandardSchemaV1, R = unknown, Code extends string = string> {
  readonly name: string
  readonly payload: S
  readonly result: ((result: R) => unknown) | undefined
  readonly failures: readonly Code[]
  readonly enqueueOverHttp: boolean
  readonly retry: RetryOptions<Code> | undefined
  readonly timeoutMs: number | undefined
  readonly idempotent: boolean
  readonly concurrency: number | undefined
  readonly scopeConcurrency: number | undefined
  readonly rateLimit: RateLimitOptions | undefined
  readonly fairness: 'scope' | undefined
  /** A JobFailure with one of the declared codes, to throw from a handler or a function it calls. */
  failure(code: Code): JobFailure<Code>
}

const DEFINITION_KEYS = ['payload', 'result', 'failures', 'enqueueOverHttp', 'retry', 'timeoutMs', 'idempotent', 'concurrency', 'scopeConcurrency', 'rateLimit', 'fairness'] as const
const RATE_LIMIT_KEYS = ['limit', 'periodMs', 'key'] as const
const REGISTER_KEYS = [...DEFINITION_KEYS, 'handler'] as const


/**
 * Defines a kind once, for producers and workers to share. Checks the
 * definition now (a bad code or schema is a RegistrationError at import,
 * not at the first job). Unknown keys are refused.
 */
export function defineKind<S extends StandardSchemaV1, R = unknown, const Code extends string = never>(
  name: string,
  options: KindOptions<S, R, Code>,
): KindDef<S, R, Code> {
  validateDefinition(name, options, DEFINITION_KEYS)
  const failures = Object.freeze([...(options.failures ?? [])])
  return Object.freeze({
    name,
    payload: options.payload,
    result: options.result,
    failures,
    enqueueOverHttp: options.enqueueOverHttp === true,
    retry: options.retry,
    timeoutMs: options.timeoutMs,
    idempotent: options.idempotent === true,
    concurrency: options.concurrency,
    scopeConcurrency: options.scopeConcurrency,
    // A copy: the definition is frozen, and a later change to the caller's object must not change the kind.
    rateLimit: options.rateLimit === undefined ? undefined : Object.freeze({ ...options.rateLimit }),
    fairness: options.fairness,
    failure: (code: Code) => new JobFailure<Code>(code),
  })
}

/** Turns the one-step form's options (with a handler) into a definition and its handler. */
export function splitDefinition(name: string, definition: KindDefinition<StandardSchemaV1, unknown, string>): [KindDef, Handler<StandardSchemaV1, unknown, string>] {
  validateDefinition(name, definition, REGISTER_KEYS)
  const { handler, ...options } = definition
  return [defineKind(name, options), handler]
}

/**
 * The application's hook for what a handler threw (runner option
 * `onHandlerError`): called in the handler's process with the thrown
 * value itself whenever a throw ends the attempt as a failure, with the
 * code the job gets for it: `internal_error` for anything undeclared, or
 * the declared code of a thrown JobFailure (`job.fail`). Never for a
 * snooze. jobtable never stores, returns or logs that value; the hook is
 * the one place the application sees it (to log it, or report it to an
 * error tracker).
 */
export type HandlerErrorHook = (error: unknown, job: { readonly id: string; readonly kind: string; readonly attempt: number; readonly code: string }) => void

/** The outcome of running one job's handler: a public result, or a failure code and a loggable reason. */
export type Outcome =
  | { readonly result: string }
  | { readonly code: string; readonly reason: string }
  | { readonly snoozeMs: number }
  /** `job.rateLimited`: a snooze until the cooldown's end, recording the cooldown. */
  | { readonly rateLimited: Cooldown }

/**
 * A kind known to a runner, with the code that runs its jobs when this
 * runner is one of its workers (`handler` set); a producer knows kinds
 * without handlers.
 */
export class RegisteredKind {
  readonly name: string
  readonly schema: StandardSchemaV1
  readonly enqueueOverHttp: boolean
  readonly handler: Handler<StandardSchemaV1, unknown, string> | undefined
  /** Attempts each job of the kind may have: stored with the job at its enqueue. */
  readonly maxAttempts: number
  readonly timeoutMs: number | null
  readonly idempotent: boolean
  /** The kind's rules for claims (limits on running jobs, rate limit, fair order), or undefined when it has none. */
  readonly rule: KindRule | undefined
  /** Its rate limit as the driver applies it, or null. */
  readonly rate: RateRule | null
  /** Whether its jobs are claimed in turn across scopes (enqueues give them a position). */
  readonly fair: boolean
  /** Whether it limits how many of its jobs run at once (concurrency or scopeConcurrency). */
  readonly capsRunning: boolean
  readonly #definition: KindDef
  readonly #declared: ReadonlySet<string>
  readonly #retried: ReadonlySet<string>
  readonly #baseMs: number
  readonly #maxMs: number

  constructor(definition: KindDef, handler: Handler<StandardSchemaV1, unknown, string> | undefined) {
    if (handler !== undefined && typeof handler !== 'function') throw new RegistrationError(definition.name, 'the handler must be a function')
    this.name = definition.name
    this.schema = definition.payload
    this.enqueueOverHttp = definition.enqueueOverHttp
    this.handler = handler
    this.#definition = definition
    this.#declared = new Set(definition.failures)
    this.idempotent = definition.idempotent
    this.maxAttempts = definition.retry?.maxAttempts ?? (definition.idempotent ? 3 : 1)
    this.timeoutMs = definition.timeoutMs ?? null
    const { concurrency, scopeConcurrency, rateLimit } = definition
    this.capsRunning = concurrency !== undefined || scopeConcurrency !== undefined
    this.rate = rateLimit === undefined ? null : { limit: rateLimit.limit, periodMs: rateLimit.periodMs, bucket: bucketOf(definition.name, rateLimit.key) }
    this.fair = definition.fairness === 'scope'
    this.rule =
      this.capsRunning || this.rate !== null || this.fair
        ? { concurrency: concurrency ?? null, scopeConcurrency: scopeConcurrency ?? null, rate: this.rate, fair: this.fair }
        : undefined
    this.#retried = new Set(definition.retry?.codes ?? [])
    this.#baseMs = definition.retry?.backoff?.baseMs ?? 1_000
    this.#maxMs = definition.retry?.backoff?.maxMs ?? 600_000
  }

  /** The failure codes the kind declared. */
  get failures(): readonly string[] {
    return this.#definition.failures
  }

  /** Whether a failure with `code` goes back to the queue while the job has attempts left. */
  retries(code: string): boolean {
    return this.#retried.has(code)
  }

  /** The delay before the attempt after `attempt`: exponential, capped, with a random half taken off. */
  backoffMs(attempt: number, random: () => number = Math.random): number {
    const full = Math.min(this.#maxMs, this.#baseMs * 2 ** Math.min(Math.max(0, attempt - 1), 40))
    return Math.round(full / 2 + (random() * full) / 2)
  }

  /** The cooldown key of this kind's job in `scope` when a handler names none: the job's rate bucket. */
  bucket(scope: string | null): string {
    return rateBucket(this.name, scope, this.rate)
  }

  /** The failure a thrown value stands for: a declared code, or internal_error for anything else, even a value that throws when inspected. */
  #classify(thrown: unknown, scope: string | null, now: () => number): Outcome {
    try {
      if (thrown instanceof JobRateLimited) return this.#rateLimited(thrown as JobRateLimited, scope, now)
      if (thrown instanceof JobSnooze) {
        const ms: unknown = (thrown as JobSnooze).delayMs
        return typeof ms === 'number' && Number.isSafeInteger(ms) && ms >= 0 ? { snoozeMs: ms } : { code: CODE_INTERNAL, reason: 'snooze without a valid delay' }
      }
      if (!(thrown instanceof JobFailure)) return { code: CODE_INTERNAL, reason: 'handler error' }
      const code: unknown = thrown.code
      if (typeof code !== 'string' || !this.#declared.has(code)) return { code: CODE_INTERNAL, reason: 'undeclared failure code' }
      return { code, reason: 'handler failure' }
    } catch {
      return { code: CODE_INTERNAL, reason: 'handler error' }
    }
  }

  /** What `job.rateLimited` asked for, checked: a cooldown, or internal_error with a fixed reason (never the value). */
  #rateLimited(thrown: JobRateLimited, scope: string | null, now: () => number): Outcome {
    const options: unknown = thrown.options
    if (options !== undefined && (options === null || typeof options !== 'object' || Array.isArray(options) || Object.keys(options).some((k) => k !== 'key'))) {
      return { code: CODE_INTERNAL, reason: 'rateLimited with unknown options' }
    }
    const key: unknown = (options as { key?: unknown } | undefined)?.key
    if (key !== undefined && !isCooldownKey(key)) return { code: CODE_INTERNAL, reason: 'rateLimited with an invalid key' }
    const until = cooldownEnd(thrown.until, now)
    if (until === undefined) return { code: CODE_INTERNAL, reason: 'rateLimited without a valid time' }
    return { rateLimited: { key: (key as string | undefined) ?? this.bucket(scope), until } }
  }

  /** The public JSON of a (partial) result; throws ResultNotPublicError. */
  project(result: unknown): string {
    return publicJson(this.#definition.result, result)
  }

  /**
   * Runs a job's handler and returns its outcome. The reason logged for a
   * failure is one of a few fixed phrases: nothing the handler threw is
   * kept, not even to log.
   */
  async run(payloadText: string, ctx: JobContext<unknown>, thrown?: (error: unknown, code: string) => void, now: () => number = Date.now): Promise<Outcome> {
    const handler = this.handler
    if (handler === undefined) return { code: CODE_INTERNAL, reason: 'no handler in this runner' }
    // Awaited only when asynchronous: a synchronous schema or handler costs no extra turn per job.
    let payload: { value: unknown } | undefined
    try {
      const decoded = decodePayload(this.schema, payloadText)
      payload = isThenable(decoded) ? await decoded : decoded
    } catch {
      payload = undefined // a schema that throws: the payload does not fit it
    }
    if (payload === undefined) return { code: CODE_INTERNAL, reason: 'payload does not fit the kind schema' }
    let result: unknown
    try {
      result = handler(payload.value, ctx)
      if (isThenable(result)) result = await result
    } catch (error) {
      const outcome = this.#classify(error, ctx.scope, now)
      // What the handler threw reaches the application's own hook, in this process only, when it ends the attempt as a failure (not a snooze).
      if (thrown !== undefined && 'code' in outcome) thrown(error, outcome.code)
      return outcome
    }
    try {
      return { result: this.project(result) }
    } catch {
      return { code: CODE_INTERNAL, reason: 'result has no valid public JSON' }
    }
  }
}

function validateDefinition(name: string, def: object | undefined, keys: readonly string[]): void {
  if (typeof name !== 'string' || name === '') throw new RegistrationError(String(name ?? ''), 'empty kind')
  if (def === undefined || def === null || typeof def !== 'object') throw new RegistrationError(name, 'missing definition')
  for (const key of Object.keys(def)) {
    if (!keys.includes(key)) throw new RegistrationError(name, `unknown option ${JSON.stringify(key)} (known: ${keys.join(', ')})`)
  }
  const d = def as Partial<KindDefinition<StandardSchemaV1, unknown, string>>
  if (keys.includes('handler') && typeof d.handler !== 'function') throw new RegistrationError(name, 'missing handler')
  if (typeof d.payload?.['~standard']?.validate !== 'function') {
    throw new RegistrationError(name, 'payload is not a Standard Schema (zod, valibot, arktype)')
  }
  if (d.result !== undefined && typeof d.result !== 'function') {
    throw new RegistrationError(name, 'result must be a function returning the public JSON value')
  }
  if (d.enqueueOverHttp !== undefined && typeof d.enqueueOverHttp !== 'boolean') {
    throw new RegistrationError(name, 'enqueueOverHttp must be true or false')
  }
  validateLifecycle(name, d)
  validateClaimRules(name, d)
  const codes: unknown = d.failures ?? []
  if (!Array.isArray(codes)) throw new RegistrationError(name, 'failures must be an array of codes')
  for (const code of codes) {
    if (typeof code !== 'string' || !FAILURE_CODE_PATTERN.test(code)) {
      throw new RegistrationError(name, `failure code ${describe(code)} is not lower-case snake case`)
    }
    if (RESERVED_CODES.has(code)) throw new RegistrationError(name, `failure code ${JSON.stringify(code)} is reserved for the runner`)
  }
}

/** Checks retry, timeoutMs and idempotent; refuses unknown keys in retry and its backoff. */
function validateLifecycle(name: string, d: Partial<KindDefinition<StandardSchemaV1, unknown, string>>): void {
  if (d.idempotent !== undefined && typeof d.idempotent !== 'boolean') throw new RegistrationError(name, 'idempotent must be true or false')
  if (d.timeoutMs !== undefined && !(Number.isSafeInteger(d.timeoutMs) && d.timeoutMs > 0)) throw new RegistrationError(name, 'timeoutMs must be an integer > 0')
  for (const key of ['concurrency', 'scopeConcurrency'] as const) {
    const value: unknown = d[key]
    if (value !== undefined && !(Number.isInteger(value) && (value as number) >= 1 && (value as number) <= 1_000_000)) {
      throw new RegistrationError(name, `${key} must be an integer from 1 to 1000000`)
    }
  }
  const retry: unknown = d.retry
  if (retry === undefined) return
  if (retry === null || typeof retry !== 'object') throw new RegistrationError(name, 'retry must be an object { maxAttempts, codes?, backoff? }')
  for (const key of Object.keys(retry)) {
    if (!['maxAttempts', 'codes', 'backoff'].includes(key)) throw new RegistrationError(name, `unknown retry option ${JSON.stringify(key)} (known: maxAttempts, codes, backoff)`)
  }
  const { maxAttempts, codes = [], backoff = {} } = retry as RetryOptions
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > 1000) throw new RegistrationError(name, 'retry.maxAttempts must be an integer from 1 to 1000')
  if (!Array.isArray(codes)) throw new RegistrationError(name, 'retry.codes must be an array of codes')
  const declared = new Set<unknown>(d.failures ?? [])
  for (const code of codes as unknown[]) {
    if (code !== CODE_INTERNAL && code !== CODE_TIMEOUT && !declared.has(code)) {
      throw new RegistrationError(name, `retry code ${describe(code)} is neither a declared failure code nor internal_error or timeout`)
    }
  }
  if (backoff === null || typeof backoff !== 'object') throw new RegistrationError(name, 'retry.backoff must be an object { baseMs?, maxMs? }')
  for (const key of Object.keys(backoff)) {
    if (key !== 'baseMs' && key !== 'maxMs') throw new RegistrationError(name, `unknown retry.backoff option ${JSON.stringify(key)} (known: baseMs, maxMs)`)
  }
  for (const [key, value] of Object.entries(backoff)) {
    if (!Number.isSafeInteger(value) || (value as number) < 0) throw new RegistrationError(name, `retry.backoff.${key} must be an integer >= 0`)
  }
}

/** Checks rateLimit (refusing unknown keys inside it, naming them) and fairness. */
function validateClaimRules(name: string, d: Partial<KindDefinition<StandardSchemaV1, unknown, string>>): void {
  const fairness: unknown = d.fairness
  if (fairness !== undefined && fairness !== 'scope') throw new RegistrationError(name, "fairness must be 'scope' (or left out: oldest first)")
  const rate: unknown = d.rateLimit
  if (rate === undefined) return
  if (rate === null || typeof rate !== 'object' || Array.isArray(rate)) throw new RegistrationError(name, 'rateLimit must be an object { limit, periodMs, key? }')
  for (const key of Object.keys(rate)) {
    if (!(RATE_LIMIT_KEYS as readonly string[]).includes(key)) throw new RegistrationError(name, `unknown rateLimit option ${JSON.stringify(key)} (known: ${RATE_LIMIT_KEYS.join(', ')})`)
  }
  const { limit, periodMs, key } = rate as { limit?: unknown; periodMs?: unknown; key?: unknown }
  if (!Number.isInteger(limit) || (limit as number) < 1 || (limit as number) > 1_000_000) throw new RegistrationError(name, 'rateLimit.limit must be an integer from 1 to 1000000')
  if (!Number.isInteger(periodMs) || (periodMs as number) < 1 || (periodMs as number) > MAX_PERIOD_MS) {
    throw new RegistrationError(name, `rateLimit.periodMs must be an integer from 1 to ${MAX_PERIOD_MS} (30 days)`)
  }
  if (key === undefined || key === 'kind' || key === 'scope') return
  if (typeof key !== 'string' || key.length === 0 || key.length > 200 || key.includes('@') || CONTROL.test(key)) {
    throw new RegistrationError(name, "rateLimit.key must be 'kind', 'scope', or a shared bucket's name of 1 to 200 characters without @ or control characters")
  }
}

/** The longest rate-limit window: 30 days. */
const MAX_PERIOD_MS = 2_592_000_000

/** The longest cooldown key a handler or an operator may name. */
export const MAX_COOLDOWN_KEY = 1024

const CONTROL = /[\u0000-\u001f\u007f]/

/** The bucket of a rate limit's `key` for kind `name`: its own name, null for one per scope, or the shared name. */
function bucketOf(name: string, key: RateLimitOptions['key']): string | null {
  if (key === undefined || key === 'kind') return name
  return key === 'scope' ? null : key
}

/** Whether `key` may name a cooldown: a non-empty string of at most MAX_COOLDOWN_KEY characters, without NUL. */
export function isCooldownKey(key: unknown): key is string {
  return typeof key === 'string' && key.length > 0 && key.length <= MAX_COOLDOWN_KEY && !key.includes('\u0000')
}

/** The latest time a Date can hold, in epoch ms. */
const MAX_TIME = 8.64e15

/** `job.rateLimited`'s time as epoch ms: a Date, epoch ms (>= 1e11), or a delay from `now()`; undefined for anything else. */
function cooldownEnd(until: unknown, now: () => number): number | undefined {
  let ms: number
  if (until instanceof Date) ms = until.getTime()
  else if (typeof until !== 'number' || !(until >= 0)) return undefined
  else ms = until >= 1e11 ? until : now() + until
  if (!Number.isFinite(ms) || Math.abs(ms) > MAX_TIME) return undefined
  // Rounded up: a provider's reset is never cut short.
  return Math.ceil(ms)
}

function describe(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : `of type ${typeof v}`
}

/** Whether `value` is a definition made by defineKind (and not the one-step form's name). */
export function isKindDefinition(value: unknown): value is KindDef {
  return typeof value === 'object' && value !== null && typeof (value as KindDef).failure === 'function' && typeof (value as KindDef).name === 'string'
}
