import { expect, it } from 'vitest'
import { bearerTokens, FORBIDDEN, UNAUTHENTICATED } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'
import { servers } from './client.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_B = 'token-for-household-b-0002'
const MISSING = '00000000-0000-4000-8000-000000000000'

describeEachBackend('access control', (backend) => {
  const h = harness(backend)
  const s = servers()

  async function setup() {
    const runner = h.runner({ workers: 4 })
    const echo = runner.register('echo', { payload: echoPayload, result: (n: number) => ({ n }), handler: ({ n }) => n, enqueueOverHttp: true })
    const done = track(runner)
    await runner.start()
    const api = await s.serve(runner, { authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_B]: 'household-b' }), eventsPollMs: 20 })
    return { runner, echo, api, done }
  }

  it('refuses a missing, malformed or unknown token with 401 and WWW-Authenticate, on every jobs route', async () => {
    const { api, runner } = await setup()
    const id = await runner.enqueue('echo', { n: 1 }, { scope: 'household-a' })
    for (const header of [undefined, 'Basic dXNlcjpwYXNz', 'Bearer', `Bearer ${TOKEN_A}x`, `Bearer ${TOKEN_A.slice(0, -1)}`, TOKEN_A]) {
      const headers: Record<string, string> = header ? { authorization: header } : {}
      for (const [method, path] of [
        ['GET', '/api/v1/jobs'],
        ['POST', '/api/v1/jobs'],
        ['GET', `/api/v1/jobs/${id}`],
        ['GET', `/api/v1/jobs/${id}/events`],
      ] as const) {
        const a = await api.call(method, path, { headers, body: method === 'POST' ? '{"kind":"echo","payload":{"n":1}}' : undefined })
        expect([a.status, a.json.code, a.headers.get('www-authenticate')], `${method} ${path} ${header}`).toEqual([401, 'unauthenticated', 'Bearer'])
      }
    }
    expect((await runner.list()).jobs).toHaveLength(1)
    // The document holds no data and needs no token.
    expect((await api.get('/api/v1/openapi.json')).status).toBe(200)
  })

  it('answers 403 when the hook forbids, and refuses tokens that are short or empty at configuration', async () => {
    const { runner } = await setup()
    const api = await s.serve(runner, { authorize: (req) => (req.headers.get('x-role') === 'banned' ? FORBIDDEN : req.headers.get('x-role') ? 'r' : UNAUTHENTICATED) })
    const banned = await api.call('GET', '/api/v1/jobs', { headers: { 'x-role': 'banned' } })
    expect([banned.status, banned.json.code]).toEqual([403, 'forbidden'])
    expect((await api.call('GET', '/api/v1/jobs', { headers: { 'x-role': 'ok' } })).status).toBe(200)
    expect(() => bearerTokens({ short: 'a' })).toThrow(/at least 16/)
    expect(() => bearerTokens({})).toThrow(/at least one/)
    expect(() => bearerTokens({ [TOKEN_A]: '' })).toThrow(/scope/)
  })

  it('isolates two scopes with many jobs each: no cross-scope read, list row or event, and the same answer as a missing id', async () => {
    const { api, runner, echo, done } = await setup()
    const ids: Record<'a' | 'b', string[]> = { a: [], b: [] }
    for (let n = 0; n < 40; n++) {
      ids.a.push((await api.post({ kind: 'echo', payload: { n } }, TOKEN_A)).json.id)
      ids.b.push((await api.post({ kind: 'echo', payload: { n } }, TOKEN_B)).json.id)
    }
    // Jobs enqueued by the application itself, under each scope and under none.
    ids.a.push(await echo.enqueue({ n: 100 }, { scope: 'household-a' }))
    ids.b.push(await echo.enqueue({ n: 100 }, { scope: 'household-b' }))
    const unscoped = await echo.enqueue({ n: 200 })
    await done.ends([...ids.a, ...ids.b, unscoped])

    const missing = await api.get(`/api/v1/jobs/${MISSING}`, TOKEN_A)
    const missingEvents = await api.get(`/api/v1/jobs/${MISSING}/events`, TOKEN_A)
    for (const [token, own, other] of [
      [TOKEN_A, ids.a, ids.b],
      [TOKEN_B, ids.b, ids.a],
    ] as const) {
      for (const id of own) expect((await api.get(`/api/v1/jobs/${id}`, token)).status).toBe(200)
      for (const id of [...other, unscoped]) {
        const read = await api.get(`/api/v1/jobs/${id}`, token)
        expect(read.status).toBe(404)
        expect(read.text).toBe(missing.text) // byte for byte
        expect(headerNames(read.headers)).toEqual(headerNames(missing.headers))
        const events = await api.get(`/api/v1/jobs/${id}/events`, token)
        expect(events.text).toBe(missingEvents.text)
      }
      const listed: string[] = []
      let cursor: string | null = null
      do {
        const page = await api.get(`/api/v1/jobs?limit=7${cursor ? `&cursor=${cursor}` : ''}`, token)
        listed.push(...page.json.jobs.map((j: { id: string }) => j.id))
        cursor = page.json.nextCursor
      } while (cursor)
      expect(listed.sort()).toEqual([...own].sort())
    }
    // The store holds the owner of each.
    expect((await runner.list({ scope: 'household-a', limit: 1000 })).jobs.map((j) => j.id).sort()).toEqual([...ids.a].sort())
  })

  it('streams only the caller\'s own job: a stream of another scope\'s running job is refused as missing', async () => {
    const { api } = await setup()
    const id = (await api.post({ kind: 'echo', payload: { n: 3 } }, TOKEN_A)).json.id
    const foreign = await api.get(`/api/v1/jobs/${id}/events`, TOKEN_B)
    expect(foreign.status).toBe(404)
    const events = await (await api.events(id, TOKEN_A)).rest()
    expect(events.length).toBeGreaterThan(0)
    for (const e of events) expect(JSON.parse(e.data).id).toBe(id)
  })

  it('serves unscoped jobs only when no authorize hook is set', async () => {
    const runner = h.runner({ workers: 1 })
    const echo = runner.register('echo', { payload: echoPayload, handler: () => undefined, enqueueOverHttp: true })
    const scoped = await echo.enqueue({ n: 1 }, { scope: 'household-a' })
    const plain = await echo.enqueue({ n: 2 })
    const api = await s.serve(runner)
    expect((await api.get(`/api/v1/jobs/${scoped}`)).status).toBe(404)
    expect((await api.get(`/api/v1/jobs/${plain}`)).status).toBe(200)
    expect((await api.get('/api/v1/jobs')).json.jobs.map((j: { id: string }) => j.id)).toEqual([plain])
  })
})

function headerNames(headers: Headers): string[] {
  const names: string[] = []
  headers.forEach((_v, name) => names.push(name))
  return names.filter((n) => n !== 'date').sort()
}
