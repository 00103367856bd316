import { afterEach, beforeEach } from 'vitest'
import { z } from 'zod'
import { Runner, type Driver, type RunnerOptions } from 'jobtable'
import type { Backend, Store } from './backends.js'
import { captureLogs } from './logs.js'

/** Per-test store and runners for a backend, closed and dropped after each test. */
export function harness(backend: Backend) {
  let store: Store
  let runners: Runner[] = []
  beforeEach(async () => {
    store = await backend.store()
  })
  afterEach(async () => {
    for (const r of runners) await r.close().catch(() => undefined)
    runners = []
    await store.drop()
  })
  return {
    get store() {
      return store
    },
    runner(options: Partial<RunnerOptions<Driver>> = {}): Runner {
      const runner = new Runner({
        ...options,
        driver: options.driver ?? store.driver(),
        workers: options.workers ?? 2,
        logger: options.logger ?? captureLogs(),
      })
      runners.push(runner)
      return runner
    },
  }
}

/** The payload schema most tests use. */
export const echoPayload = z.strictObject({ n: z.number().int() })
