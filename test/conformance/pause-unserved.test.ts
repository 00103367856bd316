import { randomUUID } from 'node:crypto'
import { expect, it } from 'vitest'
import { CODE_UNKNOWN_KIND, type NewJob } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { until } from '../support/wait.js'

/**
 * A pause promises that the kind's queued jobs stay as they are until it
 * is resumed (README, "Pausing a kind"). The unserved-kinds chore used to
 * fail them as unknown_kind when no live runner handled the kind: a paused
 * kind is not unserved, whoever runs, since no claim would take its jobs
 * anyway. Once resumed, the chore treats it as any other kind again.
 */

const T0 = 1_000_000

function job(kind: string): NewJob {
  return { id: randomUUID(), kind, payload: '{}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }
}

describeEachBackend('a paused kind is not unserved', (backend) => {
  const h = harness(backend)

  it('driver: queueUnservedKinds leaves a paused kind out and jobFailUnserved leaves its jobs queued, until it is resumed', async () => {
    const driver = h.store.driver()
    const [paused, gone] = [job('paused_kind'), job('gone_kind')]
    await driver.jobInsertMany({ jobs: [paused, gone], now: T0 })
    // No runner is registered: no kind is served.
    expect((await driver.queueUnservedKinds({ now: T0 + 1 })).sort()).toEqual(['gone_kind', 'paused_kind'])
    expect(await driver.kindPause({ kind: 'paused_kind', now: T0 + 1 })).toBe(true)
    expect(await driver.queueUnservedKinds({ now: T0 + 2 })).toEqual(['gone_kind'])
    expect(await driver.jobFailUnserved({ createdBefore: T0 + 10, error: CODE_UNKNOWN_KIND, now: T0 + 10 })).toBe(1)
    expect(await driver.jobGet({ id: gone.id })).toMatchObject({ status: 'failed', error: CODE_UNKNOWN_KIND })
    expect(await driver.jobGet({ id: paused.id })).toMatchObject({ status: 'queued', error: null })

    expect(await driver.kindResume({ kind: 'paused_kind' })).toBe(true)
    expect(await driver.queueUnservedKinds({ now: T0 + 11 })).toEqual(['paused_kind'])
    expect(await driver.jobFailUnserved({ createdBefore: T0 + 12, error: CODE_UNKNOWN_KIND, now: T0 + 12 })).toBe(1)
    expect(await driver.jobGet({ id: paused.id })).toMatchObject({ status: 'failed', error: CODE_UNKNOWN_KIND })
  })

  it('runner: a paused kind no live runner handles is neither reported nor failed as unknown_kind, while an unpaused one is', async () => {
    const logs = captureLogs()
    // No grace and a short maintenance interval: the chore fails an unserved kind's jobs at its first pass.
    const runner = h.runner({ logger: logs, unknownKindGraceMs: 0, driver: h.store.driver({ sweepIntervalMs: 10 }) })
    runner.register('served', { payload: echoPayload, handler: () => undefined })
    const [paused, gone] = [job('paused_kind'), job('gone_kind')]
    await runner.driver.jobInsertMany({ jobs: [paused, gone], now: Date.now() })
    expect(await runner.pause('paused_kind')).toBe(true)
    await runner.start()
    // One statement fails every unserved job it finds: once the control failed, the paused kind's job was looked at too.
    expect(await until(runner, gone.id, (j) => j.status === 'failed')).toMatchObject({ error: CODE_UNKNOWN_KIND })
    expect(await runner.get(paused.id)).toMatchObject({ status: 'queued', error: null })
    const warned = (kind: string) => logs.lines.filter((l) => l.level === 'warn' && l.fields['kind'] === kind)
    expect(warned('gone_kind')).toHaveLength(1)
    expect(warned('paused_kind')).toHaveLength(0)
    await runner.stop()
  })
})
