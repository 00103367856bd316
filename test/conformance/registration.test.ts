import { expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, RegistrationError, Runner, RunnerStateError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { gate, track } from '../support/wait.js'

describeEachBackend('construction and registration', (backend) => {
  const h = harness(backend)

  it('refuses a missing driver and a worker count that is not an integer >= 1', () => {
    const logger = captureLogs()
    expect(() => new Runner({ driver: undefined as never, logger })).toThrow(ConfigError)
    expect(() => new Runner(undefined as never)).toThrow(ConfigError)
    const driver = h.store.driver()
    for (const workers of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, '4', null]) {
      expect(() => new Runner({ driver, workers: workers as number, logger }), String(workers)).toThrow(/workers must be an integer >= 1/)
    }
    expect(() => new Runner({ driver, logger: {} as never })).toThrow(ConfigError)
  })

  it('gives a runner without a worker count 10 workers, and one without a logger the default (no throw)', async () => {
    const runner = new Runner({ driver: h.store.driver() })
    const release = gate()
    let running = 0
    const kind = runner.register('echo', {
      payload: echoPayload,
      handler: async () => {
        running++
        await release.promise
      },
    })
    const done = track(runner)
    const ids = await kind.enqueueMany(Array.from({ length: 12 }, (_, n) => ({ n })))
    await runner.start()
    await done.starts(10)
    await runner.get(ids[0]!) // a round trip: an 11th worker would have started by now
    await new Promise((r) => setImmediate(r))
    expect(running).toBe(10)
    release.open()
    await done.ends(ids)
    await runner.close()
  })

  it('refuses an empty kind, a missing handler or schema, a duplicate, and registration after start', async () => {
    const runner = h.runner()
    const handler = () => undefined
    expect(() => runner.register('', { payload: echoPayload, handler })).toThrow(RegistrationError)
    expect(() => runner.register('a', { payload: echoPayload } as never)).toThrow(/missing handler/)
    expect(() => runner.register('a', undefined as never)).toThrow(/missing definition/)
    expect(() => runner.register('a', { payload: {} as never, handler })).toThrow(/Standard Schema/)
    expect(() => runner.register('a', { payload: echoPayload, handler, result: 'x' as never })).toThrow(/result must be a function/)
    runner.register('a', { payload: echoPayload, handler })
    expect(() => runner.register('a', { payload: echoPayload, handler })).toThrow(/already registered/)
    await runner.start()
    expect(() => runner.register('b', { payload: echoPayload, handler })).toThrow(RunnerStateError)
  })

  it('refuses failure codes that are not lower-case snake case, and the reserved ones', () => {
    const runner = h.runner()
    const handler = () => undefined
    const bad = ['', 'Upper', '1starts_with_digit', 'has-dash', 'has space', 'a'.repeat(65), 'interrupted by restart', 'ümlaut']
    for (const code of bad) {
      expect(() => runner.register(`k${bad.indexOf(code)}`, { payload: echoPayload, handler, failures: [code] }), code).toThrow(
        /not lower-case snake case/,
      )
    }
    for (const code of ['internal_error', 'unknown_kind']) {
      expect(() => runner.register(`r_${code}`, { payload: echoPayload, handler, failures: [code] })).toThrow(/reserved/)
    }
    expect(() => runner.register('n', { payload: echoPayload, handler, failures: [7 as never] })).toThrow(/of type number/)
    expect(() => runner.register('ok', { payload: echoPayload, handler, failures: ['a', 'a'.repeat(64), 'no_recipe_found'] })).not.toThrow()
  })

  it('refuses a second start and allows stop to be called twice', async () => {
    const runner = h.runner()
    runner.register('echo', { payload: z.strictObject({}), handler: () => undefined })
    await runner.start()
    await expect(runner.start()).rejects.toThrow(RunnerStateError)
    await runner.stop()
    await runner.stop()
    await expect(runner.start()).rejects.toThrow(RunnerStateError)
  })
})
