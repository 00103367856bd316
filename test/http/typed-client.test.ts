import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { createConfig, lintFromString } from '@redocly/openapi-core'
import { toStandardJsonSchema } from '@valibot/to-json-schema'
import createClient from 'openapi-fetch'
import openapiTS, { astToString } from 'openapi-typescript'
import * as v from 'valibot'
import { expect, it } from 'vitest'
import { z } from 'zod'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { servers } from './client.js'

const REPO = fileURLToPath(new URL('../..', import.meta.url))
const TSC = join(REPO, 'node_modules/typescript/bin/tsc')

interface Tree {
  name: string
  children: Tree[]
}
const tree: z.ZodType<Tree> = z.strictObject({
  name: z.string(),
  get children() {
    return z.array(tree)
  },
})

/**
 * A client as a TypeScript team writes one from the served document with
 * openapi-fetch: every @ts-expect-error must be an error, or tsc fails
 * the file (TS2578), so a document that typed payloads loosely fails.
 */
const CLIENT = `
import createClient from 'openapi-fetch'
import type { paths } from './schema.js'

const client = createClient<paths>({ baseUrl: 'http://127.0.0.1:1' })

export async function calls(): Promise<void> {
  await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { household: 'h1', days: 7 } } })
  await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { household: 'h1', days: 7 }, uniqueKey: 'week-49' } })
  // @ts-expect-error days is a number
  await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { household: 'h1', days: '7' } } })
  // @ts-expect-error a field the payload does not have (its schema is strict)
  await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { household: 'h1', days: 7, nights: 2 } } })
  // @ts-expect-error another kind's payload
  await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { url: 'https://recipes.example/soup' } } })
  // @ts-expect-error a kind that may not be enqueued over HTTP
  await client.POST('/api/v1/jobs', { body: { kind: 'internal_cleanup', payload: {} } })
  await client.POST('/api/v1/jobs', { body: { kind: 'import_recipe', payload: { url: 'https://recipes.example/soup' } } })
  // @ts-expect-error valibot's schema, converted: url is a string
  await client.POST('/api/v1/jobs', { body: { kind: 'import_recipe', payload: { url: 5 } } })
  await client.POST('/api/v1/jobs', { body: { kind: 'tree', payload: { name: 'a', children: [{ name: 'b', children: [] }] } } })
  // @ts-expect-error a recursive schema is typed at every depth
  await client.POST('/api/v1/jobs', { body: { kind: 'tree', payload: { name: 'a', children: [{ name: 2, children: [] }] } } })
  // A schema that cannot describe itself: any payload compiles, and the server checks it.
  await client.POST('/api/v1/jobs', { body: { kind: 'opaque', payload: { anything: [1, 'two'] } } })
  const { data } = await client.GET('/api/v1/jobs/{id}', { params: { path: { id: '0190a000-0000-7000-8000-000000000000' } } })
  const status: 'scheduled' | 'queued' | 'running' | 'succeeded' | 'failed' | 'cancelled' | undefined = data?.status
  void status
}
`

describeEachBackend('a typed client from the OpenAPI document', (backend) => {
  const h = harness(backend)
  const s = servers()

  const setup = async () => {
    const runner = h.runner()
    runner.register('meal_plan', { payload: z.strictObject({ household: z.string(), days: z.number().int().min(1).max(14) }), enqueueOverHttp: true, handler: () => undefined })
    runner.register('import_recipe', { payload: toStandardJsonSchema(v.strictObject({ url: v.pipe(v.string(), v.url()) })), enqueueOverHttp: true, handler: () => undefined })
    runner.register('tree', { payload: tree, enqueueOverHttp: true, handler: () => undefined })
    runner.register('opaque', { payload: v.looseObject({}), enqueueOverHttp: true, handler: () => undefined })
    runner.register('internal_cleanup', { payload: z.strictObject({}), handler: () => undefined })
    const api = await s.serve(runner)
    const doc = await api.get('/api/v1/openapi.json')
    expect(doc.status).toBe(200)
    return { runner, api, doc: doc.json as Record<string, unknown>, text: doc.text }
  }

  it('passes a maintained OpenAPI linter (Redocly, recommended rules): servers, a license, a 4xx answer on every operation', async () => {
    const { text } = await setup()
    const config = await createConfig({
      extends: ['recommended'],
      rules: { 'operation-4xx-response': 'error', 'info-license': 'error', 'info-license-strict': 'error', 'no-empty-servers': 'error', 'no-unused-components': 'error' },
    })
    const problems = await lintFromString({ source: text, absoluteRef: 'openapi.json', config })
    expect(problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`)).toEqual([])
  })

  it('generates a client with openapi-typescript that refuses a wrong payload at compile time, and accepts the right ones', async () => {
    const { doc } = await setup()
    const dir = mkdtempSync(join(REPO, 'node_modules/.cache-typed-client-'))
    try {
      writeFileSync(join(dir, 'schema.ts'), astToString(await openapiTS(doc as never)))
      writeFileSync(join(dir, 'client.ts'), CLIENT)
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({ compilerOptions: { strict: true, noEmit: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', skipLibCheck: true, types: [] }, files: ['client.ts'] }),
      )
      mkdirSync(join(dir, 'node_modules'), { recursive: true })
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
      const result = await promisify(execFile)(process.execPath, [TSC, '-p', dir]).then(
        () => ({ code: 0, out: '' }),
        (err: { code: number; stdout: string }) => ({ code: err.code, out: err.stdout }),
      )
      expect(result).toEqual({ code: 0, out: '' })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 60_000)

  it('the generated types match what the server does: the typed call is stored (201), a payload the types refuse is refused (422)', async () => {
    const { api } = await setup()
    const client = createClient<{
      '/api/v1/jobs': { post: { requestBody: { content: { 'application/json': unknown } }; responses: Record<number, { content: { 'application/json': unknown } }> } }
    }>({ baseUrl: api.base })
    const ok = await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { household: 'h1', days: 7 } } })
    expect(ok.response.status).toBe(201)
    const refused = await client.POST('/api/v1/jobs', { body: { kind: 'meal_plan', payload: { household: 'h1', days: '7' } } })
    expect(refused.response.status).toBe(422)
    const recipe = await client.POST('/api/v1/jobs', { body: { kind: 'import_recipe', payload: { url: 'not a url' } } })
    expect(recipe.response.status).toBe(422)
  })
})
