import { expect, it } from 'vitest'
import { z } from 'zod'
import * as v from 'valibot'
import { CODE_INTERNAL, InvalidPayloadError, UnknownKindError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
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
      { id: crypto.randomUUID(), kind: 'import_recipe', payload: '{"href":"https://a.example"}', scope: null },
      { id: crypto.randomUUID(), kind: 'import_recipe', payload: '{"url":"https://a.example","old":true}', scope: null },
      { id: crypto.randomUUID(), kind: 'import_recipe', payload: '{"url":"https://a.example"}', scope: null },
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
