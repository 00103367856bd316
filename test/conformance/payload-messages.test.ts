import { expect, it } from 'vitest'
import { z } from 'zod'
import * as v from 'valibot'
import { InvalidPayloadError } from 'jobtable'
import { createApi } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'

/** A value the household typed, which no error may repeat. */
const SECRET = 'sekrit-123'

/**
 * One payload, three ways wrong, each holding the secret: a wrong type
 * (a string where a number goes, and in an array of numbers), a string
 * over its length limit, a literal mismatch.
 */
const wrong = {
  servings: `${SECRET}-servings`,
  note: `${SECRET} and far too long a note`,
  mode: `${SECRET}-mode`,
  tags: [`${SECRET}-tag`],
}

/** Everything an error shows of itself: message, JSON, String(), stack, issues. */
function shown(err: InvalidPayloadError): string[] {
  return [err.message, JSON.stringify(err), String(err), err.stack ?? '', JSON.stringify(err.issues), ...err.issues.map((i) => i.message)]
}

async function refusal(promise: Promise<unknown>): Promise<InvalidPayloadError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(InvalidPayloadError)
  return err as InvalidPayloadError
}

describeEachBackend('payload issue messages never quote values', (backend) => {
  const h = harness(backend)

  it('valibot: wrong type, too long, literal mismatch and unknown key name paths and what was expected, never the value', async () => {
    const runner = h.runner()
    const kind = runner.register('plan_v', {
      payload: v.strictObject({
        servings: v.number(),
        note: v.pipe(v.string(), v.maxLength(8)),
        mode: v.literal('fast'),
        tags: v.array(v.number()),
      }),
      handler: () => undefined,
    })
    // valibot's own messages quote the value: what this test keeps out of the error.
    const raw = v.safeParse(v.number(), wrong.servings)
    expect(JSON.stringify(raw.issues?.map((i) => i.message))).toContain(SECRET)

    const err = await refusal(kind.enqueue(wrong as never))
    expect([...err.issues].sort((a, b) => a.path.localeCompare(b.path))).toEqual([
      { path: 'mode', message: 'invalid value' }, // valibot's expected is the quoted literal: not repeated
      { path: 'note', message: 'expected <=8' },
      { path: 'servings', message: 'expected number' },
      { path: 'tags.0', message: 'expected number' },
    ])
    for (const text of shown(err)) expect(text).not.toContain(SECRET)

    const unknown = await refusal(kind.enqueue({ servings: 2, note: 'ok', mode: 'fast', tags: [], extra: SECRET } as never))
    expect(unknown.issues).toEqual([{ path: 'extra', message: 'unknown field' }])
    for (const text of shown(unknown)) expect(text).not.toContain(SECRET)

    expect((await runner.list()).jobs).toEqual([])
  })

  it('zod: the same, and a custom error message that quotes its input is not repeated either', async () => {
    const runner = h.runner()
    const kind = runner.register('plan_z', {
      payload: z.strictObject({
        servings: z.number().int(),
        note: z.string().max(8),
        mode: z.literal('fast'),
        tags: z.array(z.number()),
        household: z.string().refine((s) => s.startsWith('h-'), { error: (issue) => `not a household: ${String(issue.input)}` }),
      }),
      handler: () => undefined,
    })
    const payload = { ...wrong, household: `${SECRET}-household` }
    const raw = z.strictObject({ household: z.string().refine(() => false, { error: (i) => `not a household: ${String(i.input)}` }) }).safeParse(payload)
    expect(JSON.stringify(raw.error?.issues)).toContain(SECRET)

    const err = await refusal(kind.enqueue(payload as never))
    expect([...err.issues].sort((a, b) => a.path.localeCompare(b.path))).toEqual([
      { path: 'household', message: 'invalid value' },
      { path: 'mode', message: 'invalid value' },
      { path: 'note', message: 'invalid value' },
      { path: 'servings', message: 'expected number' },
      { path: 'tags.0', message: 'expected number' },
    ])
    for (const text of shown(err)) expect(text).not.toContain(SECRET)

    const fraction = await refusal(kind.enqueue({ servings: 1.5, note: 'ok', mode: 'fast', tags: [], household: 'h-1' }))
    expect(fraction.issues).toEqual([{ path: 'servings', message: 'expected int' }])

    expect((await runner.list()).jobs).toEqual([])
  })

  it('a custom schema whose expected holds quotes or is long gets invalid value; jobtable keeps its own messages', async () => {
    const runner = h.runner()
    const expectations = [`"${SECRET}"`, `one of ('${SECRET}')`, 'x'.repeat(65), `${SECRET}\n`, 'string']
    const kind = runner.register('custom', {
      payload: {
        '~standard': {
          version: 1,
          vendor: 'test',
          validate: () => ({
            issues: expectations.map((expected, i) => ({ message: `got ${SECRET}`, path: [`f${i}`], expected })),
          }),
        },
      } as never,
      handler: () => undefined,
    })
    const err = await refusal(kind.enqueue({ any: 1 } as never))
    expect(err.issues).toEqual([
      { path: 'f0', message: 'invalid value' },
      { path: 'f1', message: 'invalid value' },
      { path: 'f2', message: 'invalid value' },
      { path: 'f3', message: 'invalid value' },
      { path: 'f4', message: 'expected string' },
    ])
    for (const text of shown(err)) expect(text).not.toContain(SECRET)
    const notJson = await refusal(kind.enqueue({ n: 1n } as never))
    expect(notJson.issues).toEqual([{ path: '', message: 'payload is not JSON' }])
    expect((await runner.list()).jobs).toEqual([])
  })

  it('the HTTP answer to such a payload names the paths, never the value, and stores nothing', async () => {
    const runner = h.runner()
    runner.register('plan_http', {
      payload: v.strictObject({ servings: v.number(), note: v.pipe(v.string(), v.maxLength(8)), mode: v.literal('fast'), tags: v.array(v.number()) }),
      handler: () => undefined,
      enqueueOverHttp: true,
    })
    const api = createApi({ runner })
    const response = await api.fetch(
      new Request('http://127.0.0.1/api/v1/jobs', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ kind: 'plan_http', payload: wrong }),
      }),
    )
    const text = await response.text()
    expect(response.status).toBe(422)
    expect(text).not.toContain(SECRET)
    const body = JSON.parse(text) as { code: string; issues: { path: string }[] }
    expect(body.code).toBe('invalid_payload')
    expect(body.issues.map((i) => i.path).sort()).toEqual(['mode', 'note', 'servings', 'tags.0'])
    api.close()
    expect((await runner.list()).jobs).toEqual([])
  })
})
