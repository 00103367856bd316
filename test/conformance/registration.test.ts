import { expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, defineKind, RegistrationError, Runner, RunnerStateError } from 'jobtable'
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

  it('refuses a rate limit or fairness out of range, naming what is wrong', () => {
    const runner = h.runner()
    const handler = () => undefined
    const refused: [unknown, RegExp][] = [
      [{ rateLimit: null }, /rateLimit must be an object \{ limit, periodMs, key\? \}/],
      [{ rateLimit: [] }, /rateLimit must be an object/],
      [{ rateLimit: { periodMs: 1_000 } }, /rateLimit\.limit must be an integer from 1 to 1000000/],
      [{ rateLimit: { limit: 0, periodMs: 1_000 } }, /rateLimit\.limit must be an integer from 1 to 1000000/],
      [{ rateLimit: { limit: 1.5, periodMs: 1_000 } }, /rateLimit\.limit/],
      [{ rateLimit: { limit: 1_000_001, periodMs: 1_000 } }, /rateLimit\.limit/],
      [{ rateLimit: { limit: 1 } }, /rateLimit\.periodMs must be an integer from 1 to 2592000000 \(30 days\)/],
      [{ rateLimit: { limit: 1, periodMs: 0 } }, /rateLimit\.periodMs/],
      [{ rateLimit: { limit: 1, periodMs: 2_592_000_001 } }, /rateLimit\.periodMs/],
      [{ rateLimit: { limit: 1, periodMs: '1000' } }, /rateLimit\.periodMs/],
      [{ rateLimit: { limit: 1, periodMs: 1_000, key: '' } }, /rateLimit\.key must be 'kind', 'scope', or a shared bucket's name/],
      [{ rateLimit: { limit: 1, periodMs: 1_000, key: 'a@b' } }, /rateLimit\.key/],
      [{ rateLimit: { limit: 1, periodMs: 1_000, key: 'a\nb' } }, /rateLimit\.key/],
      [{ rateLimit: { limit: 1, periodMs: 1_000, key: 'k'.repeat(201) } }, /rateLimit\.key/],
      [{ rateLimit: { limit: 1, periodMs: 1_000, key: 7 } }, /rateLimit\.key/],
      [{ rateLimit: { limit: 1, periodMs: 1_000, per: 'scope' } }, /unknown rateLimit option "per" \(known: limit, periodMs, key\)/],
      [{ fairness: 'tenant' }, /fairness must be 'scope'/],
      [{ fairness: true }, /fairness must be 'scope'/],
    ]
    refused.forEach(([options, message], i) => {
      expect(() => runner.register(`k${i}`, { payload: echoPayload, handler, ...(options as object) }), JSON.stringify(options)).toThrow(message)
      expect(() => runner.register(`k${i}`, { payload: echoPayload, handler, ...(options as object) })).toThrow(RegistrationError)
    })
    const accepted = [{ limit: 1, periodMs: 1 }, { limit: 1_000_000, periodMs: 2_592_000_000, key: 'scope' }, { limit: 5, periodMs: 1_000, key: 'k'.repeat(200) }, { limit: 5, periodMs: 1_000, key: 'kind' }]
    accepted.forEach((rateLimit, i) => {
      expect(() => runner.register(`ok${i}`, { payload: echoPayload, handler, rateLimit, fairness: 'scope' })).not.toThrow()
    })
  })

  it('refuses kinds that share a rate bucket with another limit or period, and a shared bucket named like a kind', () => {
    const handler = () => undefined
    const runner = h.runner()
    runner.register('plan', { payload: echoPayload, handler, rateLimit: { limit: 60, periodMs: 60_000, key: 'provider:openai' } })
    runner.register('summary', { payload: echoPayload, handler, rateLimit: { limit: 60, periodMs: 60_000, key: 'provider:openai' } })
    expect(() => runner.register('image', { payload: echoPayload, handler, rateLimit: { limit: 30, periodMs: 60_000, key: 'provider:openai' } })).toThrow(
      /rateLimit\.key "provider:openai" is shared with "plan", whose limit is 60 per 60000 ms: kinds sharing a bucket must give the same limit and periodMs/,
    )
    expect(() => runner.register('image', { payload: echoPayload, handler, rateLimit: { limit: 60, periodMs: 1_000, key: 'provider:openai' } })).toThrow(/must give the same limit and periodMs/)
    // A kind's name is its own bucket and cooldown key: a shared bucket may not be one, in either order of registration.
    expect(() => runner.register('mail', { payload: echoPayload, handler, rateLimit: { limit: 1, periodMs: 1_000, key: 'plan' } })).toThrow(/rateLimit\.key "plan" is the name of another registered kind/)
    expect(() => runner.register('provider:openai', { payload: echoPayload, handler })).toThrow(/names "provider:openai" as its shared rateLimit\.key/)
    // Per-scope buckets are <kind>@<scope>.
    runner.register('digest', { payload: echoPayload, handler, rateLimit: { limit: 1, periodMs: 1_000, key: 'scope' } })
    expect(() => runner.register('digest@h1', { payload: echoPayload, handler })).toThrow(/per-scope rate-limit buckets of "digest"/)
    runner.register('mail@eu', { payload: echoPayload, handler })
    expect(() => runner.register('mail', { payload: echoPayload, handler, rateLimit: { limit: 1, periodMs: 1_000, key: 'scope' } })).toThrow(/would include the kind "mail@eu"/)
    // A kind naming its own name as the key is its own bucket; a definition registers as the one-step form does.
    expect(() => runner.register('own', { payload: echoPayload, handler, rateLimit: { limit: 1, periodMs: 1_000, key: 'own' } })).not.toThrow()
    const image = defineKind('image', { payload: echoPayload, rateLimit: { limit: 61, periodMs: 60_000, key: 'provider:openai' } })
    expect(image.rateLimit).toEqual({ limit: 61, periodMs: 60_000, key: 'provider:openai' })
    expect(() => runner.register(image)).toThrow(/must give the same limit and periodMs/)
    expect(runner.kinds().map((k) => k.name)).toEqual(['plan', 'summary', 'digest', 'mail@eu', 'own'])
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
