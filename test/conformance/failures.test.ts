import { expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERNAL, CODE_UNKNOWN_KIND, JobFailure } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { track, until } from '../support/wait.js'

describeEachBackend('failures never leak', (backend) => {
  const h = harness(backend)

  it('fails with a declared code, logged at info with job_id and kind', async () => {
    const logs = captureLogs()
    const runner = h.runner({ logger: logs })
    const kind = runner.register('import_recipe', {
      payload: echoPayload,
      failures: ['no_recipe_found'],
      handler: () => {
        throw new JobFailure<'no_recipe_found'>('no_recipe_found')
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ id, kind: 'import_recipe', status: 'failed', result: null, error: 'no_recipe_found' })
    const line = logs.lines.find((l) => l.fields.job_id === id)
    expect(line).toMatchObject({ level: 'info', fields: { job_id: id, kind: 'import_recipe', code: 'no_recipe_found' } })
  })

  it('fails anything else with internal_error; no marker in message, stack, cause, properties or a thrown string escapes', async () => {
    const marker = `secret-${crypto.randomUUID()}`
    const withEverything = () => {
      const err = new Error(`GET https://api.example/?token=${marker} failed`, { cause: new Error(marker) })
      err.stack = `Error: ${marker}\n    at provider (${marker}.js:1:1)`
      Object.assign(err, { response: { body: marker }, url: marker, code: marker })
      return err
    }
    const throwers: Record<string, () => never> = {
      error: () => {
        throw withEverything()
      },
      string: () => {
        throw marker
      },
      object: () => {
        throw { message: marker, code: 'no_recipe_found' }
      },
      undeclared_failure: () => {
        throw new JobFailure<'not_declared'>('not_declared')
      },
      failure_subclass: () => {
        throw Object.assign(new JobFailure<'no_recipe_found'>('no_recipe_found'), { detail: marker })
      },
      nullish: () => {
        throw null
      },
      inspecting_throws: () => {
        throw new Proxy(
          {},
          {
            getPrototypeOf() {
              throw new Error(marker)
            },
          },
        )
      },
    }
    const logs = captureLogs()
    const runner = h.runner({ logger: logs, workers: 3 })
    const kinds = Object.entries(throwers).map(([name, thrower]) =>
      runner.register(name, {
        payload: echoPayload,
        failures: ['no_recipe_found'],
        handler: async (_p, job) => {
          await job.publish({ note: marker })
          return thrower()
        },
        result: () => ({ partial: true }),
      }),
    )
    const expected: Record<string, string> = {}
    const done = track(runner)
    await runner.start()
    for (const kind of kinds) {
      const id = await kind.enqueue({ n: 1 })
      expected[id] = kind.name === 'failure_subclass' ? 'no_recipe_found' : CODE_INTERNAL
    }
    await done.ends(Object.keys(expected))
    for (const [id, code] of Object.entries(expected)) {
      const job = await runner.get(id)
      expect(job.error, job.kind).toBe(code)
      expect(JSON.stringify(job)).not.toContain(marker)
    }
    const internal = logs.lines.filter((l) => l.fields.code === CODE_INTERNAL)
    expect(internal.length).toBe(Object.values(expected).filter((c) => c === CODE_INTERNAL).length)
    for (const line of internal) expect(line.level).toBe('error')
    // Scanned while open too: SQLite's -wal file exists only until the last connection closes.
    expect(await h.store.dump()).not.toContain(marker)
    await runner.close()
    expect(logs.text()).not.toContain(marker)
    expect(await h.store.dump()).not.toContain(marker)
  })

  it('never logs a payload or a result', async () => {
    const marker = `value-${crypto.randomUUID()}`
    const logs = captureLogs()
    // A job of a kind no runner has fails as unknown_kind at once: no grace, and a short maintenance interval.
    const runner = h.runner({ logger: logs, unknownKindGraceMs: 0, driver: h.store.driver({ sweepIntervalMs: 10 }) })
    const note = z.strictObject({ note: z.string() })
    const kind = runner.register('echo', {
      payload: note,
      result: () => ({ note: marker }),
      handler: () => undefined,
    })
    const failing = runner.register('failing', {
      payload: note,
      result: () => ({ note: marker }),
      handler: () => {
        throw new Error(marker)
      },
    })
    const unknown = { id: crypto.randomUUID(), kind: 'gone', payload: JSON.stringify({ note: marker }), scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }
    await runner.driver.jobInsertMany({ jobs: [unknown], now: Date.now() })
    const done = track(runner)
    await runner.start()
    const ids = [await kind.enqueue({ note: marker }), await failing.enqueue({ note: marker })]
    await done.ends(ids)
    expect(await until(runner, unknown.id, (j) => j.status === 'failed')).toMatchObject({ error: CODE_UNKNOWN_KIND })
    expect(logs.lines.length).toBeGreaterThan(0)
    expect(logs.text()).not.toContain(marker)
  })
})
