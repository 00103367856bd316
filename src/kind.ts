import type { StandardSchemaV1 } from '@standard-schema/spec'
import { JobFailure, JobSnooze, RegistrationError } from './errors.js'
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
}

/** How many jobs of a kind may run at once, in all and per scope (null: no limit). */
export interface KindLimit {
  readonly concurrency: number | null
  readonly scopeConcurrency: number | null
}

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
  /** A JobFailure with one of the declared codes, to throw from a handler or a function it calls. */
  failure(code: Code): JobFailure<Code>
}

const DEFINITION_KEYS = ['payload', 'result', 'failures', 'enqueueOverHttp', 'retry', 'timeoutMs', 'idempotent', 'concurrency', 'scopeConcurrency'] as const
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
export type Outcome = { readonly result: string } | { readonly code: string; readonly reason: string } | { readonly snoozeMs: number }

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
  /** The kind's limits on running jobs, or undefined when it has none. */
  readonly limit: KindLimit | undefined
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
    const { concurrency, scopeConcurrency } = definition
    this.limit = concurrency === undefined && scopeConcurrency === undefined ? undefined : { concurrency: concurrency ?? null, scopeConcurrency: scopeConcurrency ?? null }
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

  /** The failure a thrown value stands for: a declared code, or internal_error for anything else, even a value that throws when inspected. */
  #classify(thrown: unknown): Outcome {
    try {
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

  /** The public JSON of a (partial) result; throws ResultNotPublicError. */
  project(result: unknown): string {
    return publicJson(this.#definition.result, result)
  }

  /**
   * Runs a job's handler and returns its outcome. The reason logged for a
   * failure is one of a few fixed phrases: nothing the handler threw is
   * kept, not even to log.
   */
  async run(payloadText: string, ctx: JobContext<unknown>, thrown?: (error: unknown, code: string) => void): Promise<Outcome> {
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
      const outcome = this.#classify(error)
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

function describe(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : `of type ${typeof v}`
}

/** Whether `value` is a definition made by defineKind (and not the one-step form's name). */
export function isKindDefinition(value: unknown): value is KindDef {
  return typeof value === 'object' && value !== null && typeof (value as KindDef).failure === 'function' && typeof (value as KindDef).name === 'string'
}
