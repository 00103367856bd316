import { setTimeout as delay } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { echoPayload } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'

const skip = postgresBackend().skip

describe.skipIf(skip !== undefined)('postgres: runner heartbeats', () => {
  const t = pgSchemaPerTest()

  /** The driver, with every runnerHeartbeat taking about 100 ms (a slow database), and what its heartbeats did. */
  function slowHeartbeats() {
    // A 30 ms lease renews every 10 ms, so each renewal here takes ten ticks' worth.
    // The sweep never fails a runner's own jobs, but keep it out of the way all the same.
    const real = t.closeAfter(postgres({ connectionString: PG_URL, schema: t.schema, leaseMs: 30, sweepIntervalMs: 3_600_000 }))
    const beats = { inFlight: 0, maxInFlight: 0, started: 0, completed: 0 }
    let listeners: (() => void)[] = []
    const changed = () => {
      for (const l of listeners) l()
    }
    const driver = new Proxy(real, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target) as unknown
        if (typeof value !== 'function') return value
        if (prop !== 'runnerHeartbeat') return (value as (...a: unknown[]) => unknown).bind(target)
        return async (...args: unknown[]) => {
          beats.inFlight++
          beats.started++
          beats.maxInFlight = Math.max(beats.maxInFlight, beats.inFlight)
          changed()
          try {
            await delay(100)
            return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args)
          } finally {
            beats.inFlight--
            beats.completed++
            changed()
          }
        }
      },
    }) as Driver
    expect(driver.capabilities.liveness.heartbeatMs).toBe(10)
    /** Resolves once ok() holds, checked at each heartbeat's start and end. */
    const until = (ok: () => boolean) =>
      new Promise<void>((resolve) => {
        const check = () => {
          if (!ok()) return
          listeners = listeners.filter((l) => l !== check)
          resolve()
        }
        listeners.push(check)
        check()
      })
    return { driver, beats, until }
  }

  it('a heartbeat never overlaps the one before it: on a slow database the next tick is skipped, not stacked', async () => {
    const { driver, beats, until } = slowHeartbeats()
    const logs = captureLogs()
    const runner = t.closeAfter(new Runner({ driver, workers: 1, logger: logs }))
    runner.register('echo', { payload: echoPayload, handler: () => undefined })
    await runner.start()
    // Three renewals done: about thirty ticks have fired meanwhile.
    await until(() => beats.completed >= 3)
    await runner.stop()
    expect(beats.completed).toBeGreaterThanOrEqual(2)
    expect(beats.maxInFlight).toBe(1)
    // Each renewal landed: none failed, none found the lease lost.
    expect(logs.lines.filter((l) => /lease|renew/.test(l.message))).toEqual([])
  })

  it('a heartbeat in flight at stop lands before the unregister, so the stopped runner is not registered again', async () => {
    const { driver, beats, until } = slowHeartbeats()
    const logs = captureLogs()
    const runner = t.closeAfter(new Runner({ driver, workers: 1, logger: logs }))
    runner.register('echo', { payload: echoPayload, handler: () => undefined })
    await runner.start()
    await until(() => beats.inFlight === 1)
    await runner.stop()
    // Had stop not waited, the renewal would land after the unregister, find no row, and register again.
    expect(beats.inFlight).toBe(0)
    const rows = await t.admin.query(`SELECT id FROM "${t.schema}".runners WHERE id = $1`, [runner.id])
    expect(rows.rowCount).toBe(0)
    expect(logs.lines.filter((l) => /lease|renew|unregister/.test(l.message))).toEqual([])
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL heartbeat tests SKIPPED: ${skip}`)
