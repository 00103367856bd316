/**
 * What an operator reads of a runner's start: one info line naming the
 * kinds it works on and its worker count, nothing else (no payload, no
 * database address, no schedule's payload), logged once the runner has
 * started, and never for a start that failed.
 */
import { expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'

const SECRET = 'SECRET-MARKER-start-81'
const payload = z.strictObject({ note: z.string() })

describeEachBackend('the runner’s start line', (backend) => {
  const h = harness(backend)

  it('the first start() logs one info line, { kinds, workers } "runner started": the kinds it handles (not those it only enqueues), and nothing secret', async () => {
    const logs = captureLogs()
    const runner = h.runner({ workers: 3, logger: logs })
    runner.register('send_mail', { payload, handler: () => undefined })
    runner.register('plan_week', { payload, handler: () => undefined })
    // Known here, handled elsewhere: not one of this runner's kinds to work on.
    runner.register(defineKind('import_recipe', { payload }))
    runner.schedule('nightly-mail', 'send_mail', { cron: '0 3 * * *', payload: { note: SECRET } })
    await runner.enqueue('send_mail', { note: SECRET })
    expect(logs.lines.filter((l) => l.message === 'runner started')).toEqual([])

    await runner.start()
    expect(logs.lines.filter((l) => l.message === 'runner started')).toEqual([{ level: 'info', fields: { kinds: ['send_mail', 'plan_week'], workers: 3 }, message: 'runner started' }])
    await expect(runner.start()).rejects.toThrow(/already started/)
    await runner.stop()
    expect(logs.lines.filter((l) => l.message === 'runner started')).toHaveLength(1)
    expect(logs.text()).not.toContain(SECRET)
  })

  it('a start that fails logs no start line; the start after it logs one', async () => {
    const logs = captureLogs()
    const faulty = new FaultyDriver(h.store.driver())
    const runner = h.runner({ driver: faulty.driver, workers: 1, logger: logs })
    runner.register('send_mail', { payload, handler: () => undefined })
    // The sweep at start fails with an error that is not transient: start() rejects, and may be tried again.
    faulty.failNth('jobFailInterrupted', 1, () => new Error('the sweep failed'))
    await expect(runner.start()).rejects.toThrow()
    expect(logs.lines.filter((l) => l.message === 'runner started')).toEqual([])
    await runner.start()
    expect(logs.lines.filter((l) => l.message === 'runner started').map((l) => l.fields)).toEqual([{ kinds: ['send_mail'], workers: 1 }])
  })
})
