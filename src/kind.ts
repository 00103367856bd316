import type { StandardSchemaV1 } from '@standard-schema/spec'
import { JobFailure, RegistrationError } from './errors.js'
import { CODE_INTERNAL, FAILURE_CODE_PATTERN, RESERVED_CODES } from './job.js'
import { decodePayload, isThenable } from './payload.js'
import { publicJson } from './result.js'

/** What a handler receives beside its payload. */
export interface JobContext<R, Code extends string = string> {
  /** The job's id. */
  readonly id: string
  /** The job's kind. */
  readonly kind: string
  /** Aborts when the runner stops. A handler that ends early because of it leaves its job to fail as interrupted at the next start. */
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
   * A signal for the handler's own last write (the one recording what the
   * job did): not aborted by stop, but bounded by FINAL_WRITE_TIMEOUT_MS.
   */
  finalWriteSignal(): AbortSignal
}

/** How one kind of job is handled; handed to `runner.register`. */
export interface KindDefinition<S extends StandardSchemaV1, R, Code extends string> {
  /** The payload's schema, any Standard Schema (zod, valibot, arktype). Use a strict object schema; unknown fields are refused either way. */
  readonly payload: S
  /** Runs one job. Its return value is the final result; throwing fails the job. */
  readonly handler: (payload: StandardSchemaV1.InferOutput<S>, ctx: JobContext<R, Code>) => Promise<R> | R
  /**
   * The public projection of a result: exactly what is stored and returned.
   * Default: no public result (null), so a private field can never leak by
   * omission.
   */
  readonly result?: (result: R) => unknown
  /** The failure codes the handler may throw with JobFailure, each matching `^[a-z][a-z0-9_]{0,63}$`. */
  readonly failures?: readonly Code[]
  /** Whether `POST /api/v1/jobs` may enqueue this kind. Default false: kinds are not exposed over HTTP. */
  readonly enqueueOverHttp?: boolean
}

/** The outcome of running one job's handler: a public result, or a failure code and a loggable reason. */
export type Outcome = { readonly result: string } | { readonly code: string; readonly reason: string }

/** A registered kind, with its payload schema and the code that runs its jobs. */
export class RegisteredKind {
  readonly name: string
  readonly schema: StandardSchemaV1
  readonly enqueueOverHttp: boolean
  readonly #definition: KindDefinition<StandardSchemaV1, unknown, string>
  readonly #declared: ReadonlySet<string>

  constructor(name: string, definition: KindDefinition<StandardSchemaV1, unknown, string>) {
    validateDefinition(name, definition)
    this.name = name
    this.schema = definition.payload
    this.enqueueOverHttp = definition.enqueueOverHttp === true
    this.#definition = definition
    this.#declared = new Set(definition.failures ?? [])
  }

  /** The failure a thrown value stands for: a declared code, or internal_error for anything else, even a value that throws when inspected. */
  #classify(thrown: unknown): Outcome {
    try {
      if (!(thrown instanceof JobFailure)) return { code: CODE_INTERNAL, reason: 'handler error' }
      const code = thrown.code
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
  async run(payloadText: string, ctx: JobContext<unknown>): Promise<Outcome> {
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
      result = this.#definition.handler(payload.value, ctx)
      if (isThenable(result)) result = await result
    } catch (thrown) {
      return this.#classify(thrown)
    }
    try {
      return { result: this.project(result) }
    } catch {
      return { code: CODE_INTERNAL, reason: 'result has no valid public JSON' }
    }
  }
}

function validateDefinition(name: string, def: KindDefinition<StandardSchemaV1, unknown, string> | undefined): void {
  if (typeof name !== 'string' || name === '') throw new RegistrationError(String(name ?? ''), 'empty kind')
  if (def === undefined || def === null || typeof def !== 'object') throw new RegistrationError(name, 'missing definition')
  if (typeof def.handler !== 'function') throw new RegistrationError(name, 'missing handler')
  if (typeof def.payload?.['~standard']?.validate !== 'function') {
    throw new RegistrationError(name, 'payload is not a Standard Schema (zod, valibot, arktype)')
  }
  if (def.result !== undefined && typeof def.result !== 'function') {
    throw new RegistrationError(name, 'result must be a function returning the public JSON value')
  }
  const codes: unknown = def.failures ?? []
  if (!Array.isArray(codes)) throw new RegistrationError(name, 'failures must be an array of codes')
  for (const code of codes) {
    if (typeof code !== 'string' || !FAILURE_CODE_PATTERN.test(code)) {
      throw new RegistrationError(name, `failure code ${describe(code)} is not lower-case snake case`)
    }
    if (RESERVED_CODES.has(code)) throw new RegistrationError(name, `failure code ${JSON.stringify(code)} is reserved for the runner`)
  }
}

function describe(v: unknown): string {
  return typeof v === 'string' ? JSON.stringify(v) : `of type ${typeof v}`
}
