import type { Driver } from 'jobtable'
import { DatabaseError } from 'jobtable'

type Method = 'jobInsertMany' | 'jobClaim' | 'jobPublish' | 'jobFinishMany' | 'jobFailInterrupted' | 'jobGet' | 'jobRelease' | 'queueCounts'

/**
 * Wraps a real driver to inject faults: every call goes to the real
 * driver unless a rule says to fail it first. The database stays real.
 */
export class FaultyDriver {
  readonly calls: Record<string, number> = {}
  readonly #rules: { method: Method; shouldFail: (call: number, args: unknown[]) => boolean; error: () => unknown; later?: boolean }[] = []
  readonly driver: Driver

  constructor(real: Driver) {
    this.driver = new Proxy(real, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown
        if (typeof value !== 'function') return value
        return (...args: unknown[]) => {
          // A final write, whether or not the driver claims in the same transaction.
          const name = prop === 'jobFinishManyAndClaim' ? 'jobFinishMany' : String(prop)
          const call = (this.calls[name] = (this.calls[name] ?? 0) + 1)
          for (const rule of this.#rules) {
            if (rule.method === name && rule.shouldFail(call, args)) {
              // `later`: as a database answers, after a turn of the event loop, not in the same one.
              if (rule.later) return new Promise((_, reject) => setImmediate(() => reject(rule.error())))
              return Promise.reject(rule.error())
            }
          }
          const hold = this.#holds.get(name)
          let result: unknown
          if (hold !== undefined) {
            this.#holds.delete(name)
            hold.entered()
            result = hold.until.then(() => (value as (...a: unknown[]) => unknown).apply(target, args))
          } else result = (value as (...a: unknown[]) => unknown).apply(target, args)
          const calls = this.#recorded.get(String(prop))
          if (calls !== undefined) {
            const call: RecordedCall = { params: args[0] }
            calls.push(call)
            void Promise.resolve(result).then((r) => (call.result = r), () => undefined)
          }
          return result
        }
      },
    })
  }

  readonly #holds = new Map<string, { until: Promise<void>; entered: () => void }>()
  readonly #recorded = new Map<string, RecordedCall[]>()

  /**
   * Records every call of the driver method `method` (by its own name:
   * jobFinishManyAndClaim apart from jobFinishMany) from now on, each with
   * its params and, once it has resolved, what it resolved to; returns the
   * list it fills.
   */
  record(method: string): RecordedCall[] {
    let calls = this.#recorded.get(method)
    if (calls === undefined) this.#recorded.set(method, (calls = []))
    return calls
  }

  /**
   * Holds the next call of method until `until` resolves, then makes it for
   * real; resolves once that call has arrived.
   */
  holdNext(method: Method, until: Promise<void>): Promise<void> {
    return new Promise((entered) => this.#holds.set(method, { until, entered }))
  }

  /** Fails the nth call of method from now, once; with `later`, after a turn of the event loop, as a database would. */
  failNth(method: Method, n: number, error: () => unknown = busy, options: { later?: boolean } = {}): void {
    const target = (this.calls[method] ?? 0) + n
    this.#rules.push({ method, shouldFail: (call) => call === target, error, later: options.later })
  }

  /** Fails every call of method whose params object satisfies the predicate. */
  failWhen(method: Method, predicate: (params: never) => boolean, error: () => unknown = busy): void {
    this.#rules.push({ method, shouldFail: (_call, args) => predicate(args[0] as never), error })
  }

  /** Fails every call of method until the returned function is called. */
  failUntilCleared(method: Method, error: () => unknown = busy): () => void {
    let active = true
    this.#rules.push({ method, shouldFail: () => active, error })
    return () => {
      active = false
    }
  }
}

/** One call of a recorded driver method: its params object, and what it resolved to once it has. */
export interface RecordedCall {
  readonly params: unknown
  result?: unknown
}

export const busy = (): unknown => new DatabaseError('injected', 'SQLITE_BUSY', true)
export const corrupt = (): unknown => new DatabaseError('injected', 'SQLITE_CORRUPT', false)
