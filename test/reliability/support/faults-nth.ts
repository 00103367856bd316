import type { Driver } from 'jobtable'
import { FaultyDriver } from '../../support/faults.js'
import { type NativeFault, withFault, withoutFault } from './faults-native.js'

/** Driver methods that are no database operation of their own (they set up or tear down): not counted, never faulted. */
const NOT_CALLS = new Set(['onWake', 'close', 'migrate'])

/** Which driver calls fail, and how. */
export interface CallPlan {
  /** The 1-based index, among every driver call of the run, of the first call to fail. */
  readonly at: number
  /** 0: call `at` alone fails. Otherwise every call that begins within this many ms of call `at` fails too. */
  readonly windowMs: number
  readonly fault: NativeFault
}

/**
 * Numbers every driver call of a run in order (FaultyDriver counts them
 * by method) and arms the native fault (faults-native.ts) for the calls
 * the plan names: the error then comes from beneath the driver's mapping.
 */
export class NthCall {
  readonly faulty: FaultyDriver
  readonly driver: Driver
  /** Each call's method name, in call order (index 0 is call 1). */
  readonly names: string[] = []
  /** How many faults were raised, and when the last one was (epoch ms). */
  raised = 0
  lastRaisedAt: number | undefined
  #windowStart: number | undefined

  constructor(real: Driver, plan?: CallPlan) {
    this.faulty = new FaultyDriver(real)
    const inner = this.faulty.driver
    this.driver = new Proxy(inner, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver) as unknown
        if (typeof value !== 'function' || NOT_CALLS.has(String(prop))) return value
        return (...args: unknown[]) => {
          const call = () => (value as (...a: unknown[]) => unknown).apply(target, args)
          const index = this.names.push(String(prop))
          if (plan === undefined || !this.#armed(plan, index)) return withoutFault(call)
          return withFault(plan.fault, () => {
            this.raised++
            this.lastRaisedAt = Date.now()
          }, call)
        }
      },
    })
  }

  /** How many database calls FaultyDriver counted, by method. */
  get counts(): Record<string, number> {
    return Object.fromEntries(Object.entries(this.faulty.calls).filter(([name]) => !NOT_CALLS.has(name)))
  }

  #armed(plan: CallPlan, index: number): boolean {
    if (index === plan.at) {
      this.#windowStart = Date.now()
      return true
    }
    return plan.windowMs > 0 && this.#windowStart !== undefined && Date.now() < this.#windowStart + plan.windowMs
  }
}
