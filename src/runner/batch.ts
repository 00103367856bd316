import { InvalidPayloadError } from '../errors.js'
import type { RegisteredKind } from '../kind.js'
import type { EnqueueOptions, Enqueuer } from './enqueue.js'

declare const jobSpecBrand: unique symbol

/**
 * One job of a batch, with its own options: what `kind.job(payload,
 * options)` makes and `runner.enqueueMany(specs)` stores. Making one
 * validates, copies and stores nothing; the batch checks every spec
 * before it stores any. It belongs to the runner whose kind handle made
 * it.
 */
export interface JobSpec {
  /** The kind's name. */
  readonly kind: string
  readonly [jobSpecBrand]: true
}

/**
 * A JobSpec as the runner reads it: the kind, payload and options as they
 * were given. Private fields, so a spec logged shows its kind only, not
 * the runner behind it.
 */
export class Spec implements JobSpec {
  declare readonly [jobSpecBrand]: true
  readonly kind: string
  readonly #owner: Enqueuer
  readonly #registered: RegisteredKind
  readonly #payload: unknown
  readonly #options: EnqueueOptions | undefined

  /** `owner`: the enqueuer (one per runner) whose kind handle makes it. */
  constructor(owner: Enqueuer, registered: RegisteredKind, payload: unknown, options: EnqueueOptions | undefined) {
    this.kind = registered.name
    this.#owner = owner
    this.#registered = registered
    this.#payload = payload
    this.#options = options
  }

  /** The spec's kind, payload and options, for the enqueuer that made it; undefined for any other. */
  readFor(owner: Enqueuer): { kind: RegisteredKind; payload: unknown; options: EnqueueOptions | undefined } | undefined {
    return owner === this.#owner ? { kind: this.#registered, payload: this.#payload, options: this.#options } : undefined
  }
}

/**
 * Encodes every job of a batch with `encode(i)`, which returns the job's
 * payload text (or a promise of it) or throws. A refusal refuses the
 * whole batch with the error of the first bad job by index, whatever
 * order asynchronous checks end in, naming that index (see `inBatch`).
 * Synchronous when every check is: a sync schema costs no promise per job.
 */
export function encodeBatch(call: string, count: number, encode: (i: number) => string | Promise<string>): string[] | Promise<string[]> {
  const texts: (string | Promise<string>)[] = new Array<string | Promise<string>>(count)
  let pending = false
  for (let i = 0; i < count; i++) {
    let text: string | Promise<string>
    try {
      text = encode(i)
    } catch (err) {
      if (!pending) throw inBatch(call, i, err)
      return refusedAfter(call, texts.slice(0, i), inBatch(call, i, err))
    }
    texts[i] = text
    if (typeof text !== 'string') pending = true
  }
  if (!pending) return texts as string[]
  return Promise.all(texts).catch(async (err: unknown) => {
    await firstRefusal(call, texts)
    throw err
  })
}

/** Rejects with an earlier job's refusal, once the earlier checks have ended, or else with `refusal`. */
async function refusedAfter(call: string, earlier: readonly (string | Promise<string>)[], refusal: unknown): Promise<never> {
  await firstRefusal(call, earlier)
  throw refusal
}

/** Waits for every check; rejects with the first refusal by index, when there is one. */
async function firstRefusal(call: string, texts: readonly (string | Promise<string>)[]): Promise<void> {
  const settled = await Promise.allSettled(texts)
  const index = settled.findIndex((s) => s.status === 'rejected')
  if (index >= 0) throw inBatch(call, index, (settled[index] as PromiseRejectedResult).reason)
}

/**
 * The refusal of one job's payload in a batch, its message naming the
 * call and the job's index (`enqueueMany: job 3: payload of ...`), as
 * `encode` names them in its own refusals of options. Anything else (a
 * schema that throws) is passed on as it is.
 */
function inBatch(call: string, index: number, err: unknown): unknown {
  return err instanceof InvalidPayloadError ? new InvalidPayloadError(err.kind, err.issues, `${call}: job ${index}`) : err
}
