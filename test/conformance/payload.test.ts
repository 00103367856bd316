import vm from 'node:vm'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import { expect, it } from 'vitest'
import { z } from 'zod'
import * as v from 'valibot'
import { CODE_INTERNAL, InvalidPayloadError, UnknownKindError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { track } from '../support/wait.js'

describeEachBackend('payloads', (backend) => {
  const h = harness(backend)

  const recipe = z.object({ url: z.string(), servings: z.number().int().optional() }) // zod's default strips unknown keys

  it('refuses unknown fields and wrong types through the typed handle, storing nothing', async () => {
    const runner = h.runner()
    const kind = runner.register('import_recipe', { payload: recipe, handler: () => undefined })
    const refused = [
      { url: 'https://a.example', secret_token: 'x' },
      { url: 42 },
      { url: 'https://a.example', servings: 'two' },
      { url: 'https://a.example', servings: 1.5 },
      {},
      null,
      'a string',
    ]
    for (const payload of refused) {
      await expect(kind.enqueue(payload as never), JSON.stringify(payload)).rejects.toBeInstanceOf(InvalidPayloadError)
    }
    const strict = runner.register('strict_recipe', { payload: z.strictObject({ url: z.string() }), handler: () => undefined })
    await expect(strict.enqueue({ url: 'https://a.example', token: 'x', more: { a: 1 } } as never)).rejects.toMatchObject({
      issues: [
        { path: 'token', message: 'unknown field' },
        { path: 'more', message: 'unknown field' },
      ],
    })
    await expect(kind.enqueue({ url: 'https://a.example', extra: 1 } as never)).rejects.toMatchObject({
      code: 'invalid_payload',
      issues: [{ path: 'extra', message: 'unknown field' }],
    })
    expect((await runner.list()).jobs).toEqual([])
  })

  it('refuses through the dynamic enqueue: unknown kind, invalid payload, nothing stored', async () => {
    const runner = h.runner()
    runner.register('import_recipe', { payload: recipe, handler: () => undefined })
    await expect(runner.enqueue('no_such_kind', { url: 'x' })).rejects.toBeInstanceOf(UnknownKindError)
    await expect(runner.enqueue('import_recipe', { url: 'x', nested: { a: 1 } })).rejects.toMatchObject({ issues: [{ path: 'nested' }] })
    const wrong = await runner.enqueue('import_recipe', { servings: 'many' }).catch((e: unknown) => e)
    expect(wrong).toBeInstanceOf(InvalidPayloadError)
    expect((wrong as InvalidPayloadError).issues.map((i) => i.path).sort()).toEqual(['servings', 'url'])
    expect((wrong as Error).message).not.toContain('many')
    await expect(runner.enqueue('import_recipe', { url: 1n })).rejects.toMatchObject({ issues: [{ message: 'payload is not JSON' }] })
    const cyclic: Record<string, unknown> = { url: 'x' }
    cyclic.self = cyclic
    await expect(runner.enqueue('import_recipe', cyclic)).rejects.toBeInstanceOf(InvalidPayloadError)
    expect((await runner.list()).jobs).toEqual([])
    const id = await runner.enqueue('import_recipe', { url: 'https://a.example' })
    expect((await runner.list()).jobs.map((j) => j.id)).toEqual([id])
  })

  it('refuses a scope that is empty, too long or holds control characters, storing nothing', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: recipe, handler: () => undefined })
    for (const scope of ['', 'x'.repeat(257), 'house\u0000hold', 'tab\there', 42]) {
      await expect(kind.enqueue({ url: 'u' }, { scope: scope as string })).rejects.toMatchObject({ code: 'invalid_argument' })
    }
    expect((await runner.list()).jobs).toEqual([])
  })

  it('refuses unknown fields nested in arrays and objects, with valibot too', async () => {
    const runner = h.runner()
    const kind = runner.register('plan', {
      payload: v.object({ days: v.array(v.object({ dinner: v.string() })) }),
      handler: () => undefined,
    })
    await expect(kind.enqueue({ days: [{ dinner: 'soup' }, { dinner: 'stew', wine: 'red' }] } as never)).rejects.toMatchObject({
      issues: [{ path: 'days.1.wine' }],
    })
    await expect(kind.enqueue({ days: [{ dinner: 'soup' }] })).resolves.toBeTypeOf('string')
  })

  it('validates a stored payload again when its job runs: a row that no longer fits fails with internal_error', async () => {
    const runner = h.runner()
    let ran = 0
    runner.register('import_recipe', {
      payload: z.strictObject({ url: z.string() }),
      handler: () => void ran++,
    })
    // Rows as older code might have written them, straight through the driver.
    const rows = [
      { id: crypto.randomUUID(), kind: 'import_recipe', payload: '{"href":"https://a.example"}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false },
      { id: crypto.randomUUID(), kind: 'import_recipe', payload: '{"url":"https://a.example","old":true}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false },
      { id: crypto.randomUUID(), kind: 'import_recipe', payload: '{"url":"https://a.example"}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false },
    ]
    await runner.driver.jobInsertMany({ jobs: rows, now: Date.now() })
    const done = track(runner)
    await runner.start()
    await done.ends(rows.map((r) => r.id))
    expect((await runner.get(rows[0]!.id)).error).toBe(CODE_INTERNAL)
    expect((await runner.get(rows[1]!.id)).error).toBe(CODE_INTERNAL)
    expect((await runner.get(rows[2]!.id)).status).toBe('succeeded')
    expect(ran).toBe(1)
  })

  /** A schema of `{ n: number }` whose result comes as `wrap` makes it: a promise, another realm's promise, or at once. */
  function nSchema(wrap: (r: StandardSchemaV1.Result<unknown>) => unknown, fail?: 'throw' | 'reject'): StandardSchemaV1<{ n: number }> {
    return {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: (value) => {
          if (fail === 'throw') throw new Error('schema exploded')
          if (fail === 'reject') return Promise.reject(new Error('schema exploded'))
          const ok = typeof value === 'object' && value !== null && typeof (value as { n?: unknown }).n === 'number'
          return wrap(ok ? { value: { n: (value as { n: number }).n } } : { issues: [{ message: 'n must be a number', path: ['n'] }] }) as never
        },
      },
    }
  }
  const otherRealmPromise = vm.runInNewContext('Promise') as PromiseConstructor

  it('waits for a schema that validates asynchronously, in this realm or another, at enqueue and when the job runs', async () => {
    const runner = h.runner()
    const seen: unknown[] = []
    const kinds = [
      runner.register('async_here', { payload: nSchema((r) => Promise.resolve(r)), handler: (p) => void seen.push(p) }),
      runner.register('async_vm', { payload: nSchema((r) => otherRealmPromise.resolve(r)), handler: (p) => void seen.push(p) }),
    ]
    const ids: string[] = []
    for (const kind of kinds) {
      await expect(kind.enqueue({ n: 'x' } as never)).rejects.toBeInstanceOf(InvalidPayloadError)
      await expect(kind.enqueueMany([{ n: 1 }, { n: 'x' } as never])).rejects.toBeInstanceOf(InvalidPayloadError)
      ids.push(await kind.enqueue({ n: 1 }), ...(await kind.enqueueMany([{ n: 2 }, { n: 3 }])))
    }
    // A row that no longer fits, stored as older code might have: refused again when it runs, in either realm.
    const stale = kinds.map((k) => ({ id: crypto.randomUUID(), kind: k.name, payload: '{"n":"old"}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }))
    await runner.driver.jobInsertMany({ jobs: stale, now: Date.now() })
    expect((await runner.list()).jobs).toHaveLength(ids.length + stale.length)
    const done = track(runner)
    await runner.start()
    await done.ends([...ids, ...stale.map((r) => r.id)])
    for (const id of ids) expect((await runner.get(id)).status).toBe('succeeded')
    for (const { id } of stale) expect(await runner.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERNAL })
    expect(seen).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }, { n: 1 }, { n: 2 }, { n: 3 }])
  })

  it('refuses a whole enqueueMany when one payload is not JSON after others began validating asynchronously, reporting the first bad payload by index, with no stray rejection', async () => {
    const stray: unknown[] = []
    const onStray = (reason: unknown): void => void stray.push(reason)
    process.on('unhandledRejection', onStray)
    try {
      const runner = h.runner()
      const kind = runner.register('async_mix', { payload: nSchema((r) => Promise.resolve(r)), handler: () => undefined })
      // Job 0's asynchronous refusal ends after job 2 was found not to be JSON, and is the one reported.
      await expect(kind.enqueueMany([{ n: 'x' } as never, { n: 1 }, { n: 1n } as never])).rejects.toMatchObject({
        code: 'invalid_payload',
        message: expect.stringContaining('enqueueMany: job 0: '),
        issues: [{ path: 'n', message: 'invalid value' }],
      })
      await expect(kind.enqueueMany([{ n: 1 }, { n: 1n } as never, { n: 'x' } as never])).rejects.toMatchObject({
        code: 'invalid_payload',
        message: expect.stringContaining('enqueueMany: job 1: '),
        issues: [{ path: '', message: 'payload is not JSON' }],
      })
      await new Promise((r) => setTimeout(r, 20))
      expect(stray).toEqual([])
      expect((await runner.list()).jobs).toEqual([])
    } finally {
      process.off('unhandledRejection', onStray)
    }
  })

  it('fails a job with internal_error when its schema throws or rejects as it runs, and refuses a schema that returns no value', async () => {
    const logs = captureLogs()
    const runner = h.runner({ logger: logs })
    const kinds = (['throw', 'reject'] as const).map((fail) => runner.register(`schema_${fail}`, { payload: nSchema((r) => r, fail), handler: () => undefined }))
    const rows = kinds.map((k) => ({ id: crypto.randomUUID(), kind: k.name, payload: '{"n":1}', scope: null, priority: 0, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false }))
    await runner.driver.jobInsertMany({ jobs: rows, now: Date.now() })
    const broken = runner.register('broken', { payload: nSchema(() => ({})), handler: () => undefined })
    await expect(broken.enqueue({ n: 1 })).rejects.toBeInstanceOf(InvalidPayloadError)
    const done = track(runner)
    await runner.start()
    await done.ends(rows.map((r) => r.id))
    for (const { id } of rows) expect(await runner.get(id)).toMatchObject({ status: 'failed', error: CODE_INTERNAL })
    // Each failure is logged, without the schema's error text.
    expect(logs.lines.filter((l) => l.fields.code === CODE_INTERNAL)).toHaveLength(2)
    expect(logs.text()).not.toContain('exploded')
  })

  it('waits for a handler that returns a thenable other than a native promise', async () => {
    const runner = h.runner()
    const kind = runner.register('thenable', {
      payload: nSchema((r) => r),
      result: (r: { n: number }) => r,
      handler: ({ n }) => otherRealmPromise.resolve({ n: n + 1 }) as unknown as { n: number },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ n: 1 })
    await done.ends([id])
    expect(await runner.get(id)).toMatchObject({ status: 'succeeded', result: { n: 2 } })
  })

  it('hands the handler the JSON round trip of the payload, as validated', async () => {
    const runner = h.runner()
    const seen: unknown[] = []
    const kind = runner.register('dated', {
      payload: z.strictObject({ at: z.string(), n: z.string().transform(Number) }),
      handler: (p) => void seen.push(p),
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({ at: new Date(0) as unknown as string, n: '7' })
    await done.ends([id])
    expect(seen).toEqual([{ at: '1970-01-01T00:00:00.000Z', n: 7 }])
  })
})
