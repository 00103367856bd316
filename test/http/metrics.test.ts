import { afterEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { ConfigError, type Runner } from 'jobtable'
import { bearerTokens, createApi, listen, metricsHandler, UnsafeBindError, type Listening } from 'jobtable/http'
import { createMetrics, type Metrics } from 'jobtable/metrics'
import { sqliteBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { samplesOf } from '../support/prometheus.js'
import { track } from '../support/wait.js'
import { client, servers } from './client.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_OPS = 'token-for-the-operators-0003'
const TOKEN_MON = 'token-for-the-monitoring-0004'
const TOKENS = { [TOKEN_A]: 'household-a', [TOKEN_OPS]: 'ops', [TOKEN_MON]: 'monitoring' }
const PAYLOAD_MARKER = 'PAYLOAD-MARKER-h61'
const ERROR_MARKER = 'ERROR-MARKER-h62'
const PROMETHEUS_TEXT = 'text/plain; version=0.0.4; charset=utf-8'

// The HTTP side involves no driver beyond what the conformance metrics tests run on both backends.
describe('HTTP: metrics', () => {
  const h = harness(sqliteBackend)
  const s = servers()
  const opened: (Metrics | Listening)[] = []
  afterEach(async () => {
    for (const o of opened.splice(0)) await o.close()
  })

  async function setup(options: { auth: boolean }) {
    const runner = h.runner({ workers: 2 })
    runner.register('echo', {
      payload: z.strictObject({ note: z.string(), fail: z.boolean() }),
      enqueueOverHttp: true,
      handler: ({ fail }) => {
        if (fail) throw new Error(ERROR_MARKER)
      },
    })
    const metrics = createMetrics({ runner })
    opened.push(metrics)
    const done = track(runner)
    await runner.start()
    const auth = options.auth ? { authorize: bearerTokens(TOKENS), operatorScope: 'ops', metricsScope: 'monitoring' } : {}
    const api = await s.serve(runner, { ...auth, metrics: metrics.registry })
    return { runner, api, done, metrics }
  }

  it('GET /metrics answers the Prometheus text of the runner, HEAD its headers, and no payload or error text is in it', async () => {
    const { api, done } = await setup({ auth: false })
    const ids: string[] = []
    for (const fail of [false, true]) ids.push((await api.post({ kind: 'echo', payload: { note: PAYLOAD_MARKER, fail } })).json.id)
    await done.ends(ids)
    const answer = await api.get('/metrics')
    expect(answer.status).toBe(200)
    expect(answer.headers.get('content-type')).toBe(PROMETHEUS_TEXT)
    expect(answer.headers.get('cache-control')).toBe('no-store')
    const m = samplesOf(answer.text)
    expect(m.value('jobtable_jobs_enqueued_total', { kind: 'echo' })).toBe(2)
    expect(m.value('jobtable_jobs_finished_total', { kind: 'echo', status: 'succeeded' })).toBe(1)
    expect(m.value('jobtable_jobs_finished_total', { kind: 'echo', status: 'failed', code: 'internal_error' })).toBe(1)
    for (const secret of [PAYLOAD_MARKER, ERROR_MARKER, ...ids]) expect(answer.text).not.toContain(secret)

    const head = await api.call('HEAD', '/metrics')
    expect([head.status, head.text, head.headers.get('content-type')]).toEqual([200, '', PROMETHEUS_TEXT])
    const post = await api.call('POST', '/metrics')
    expect([post.status, post.json.code, post.headers.get('allow')]).toEqual([405, 'method_not_allowed', 'GET, HEAD'])
  })

  it('under a basePath, the metrics are at <basePath>/metrics', async () => {
    const runner = h.runner()
    const metrics = createMetrics({ runner })
    opened.push(metrics)
    const listening = await listen(createApi({ runner, basePath: '/jobs', metrics: metrics.registry }), { port: 0 })
    opened.push(listening)
    const answer = await fetch(`${listening.url}/jobs/metrics`)
    expect([answer.status, answer.headers.get('content-type')]).toEqual([200, PROMETHEUS_TEXT])
    expect(samplesOf(await answer.text()).value('jobtable_workers', { state: 'busy' })).toBe(0)
    expect((await fetch(`${listening.url}/metrics`)).status).toBe(404)
  })

  it('without metrics, /metrics answers as an unknown route', async () => {
    const runner = h.runner()
    const api = await s.serve(runner)
    for (const method of ['GET', 'POST']) expect((await api.call(method, '/metrics')).json.code).toBe('route_not_found')
  })

  it('with authorization, only the operator and metrics scopes may read /metrics (401 without a token, 403 for a household), and the metrics scope may not pause', async () => {
    const { api, runner } = await setup({ auth: true })
    const bare = await api.get('/metrics')
    expect([bare.status, bare.headers.get('www-authenticate')]).toEqual([401, 'Bearer'])
    expect((await api.call('GET', '/metrics', { token: 'not-a-known-token-0000000' })).status).toBe(401)
    const household = await api.get('/metrics', TOKEN_A)
    expect([household.status, household.json.code]).toEqual([403, 'forbidden'])
    for (const token of [TOKEN_OPS, TOKEN_MON]) {
      const ok = await api.get('/metrics', token)
      expect(ok.status).toBe(200)
      expect(samplesOf(ok.text).value('jobtable_workers', { state: 'idle' })).toBe(2)
    }
    expect((await api.call('POST', '/api/v1/kinds/echo/pause', { token: TOKEN_MON })).status).toBe(403)
    expect(await runner.paused()).toEqual([])
  })

  it('metricsHandler serves them on a listener of its own, behind tokens and scopes when given; refuses a public address without them', async () => {
    const runner = h.runner()
    const metrics = createMetrics({ runner })
    opened.push(metrics)
    const open = metricsHandler(metrics.registry)
    const plain = await listen({ fetch: open, close: () => undefined }, { port: 0 })
    opened.push(plain)
    const answer = await client(plain.url).get('/metrics')
    expect([answer.status, answer.headers.get('content-type')]).toEqual([200, PROMETHEUS_TEXT])
    expect(samplesOf(answer.text).value('jobtable_queue_depth', { status: 'scheduled' })).toBe(0)
    // Without authorization it answers loopback names only: a page rebinding its DNS name to 127.0.0.1 reads nothing.
    const rebound = await open(new Request('http://evil.example/metrics'))
    expect(rebound.status).toBe(403)
    // HEAD reads nothing: no body, and no query of the queue behind it.
    const head = await open(new Request('http://127.0.0.1/metrics', { method: 'HEAD' }))
    expect([head.status, await head.text(), head.headers.get('content-type')]).toEqual([200, '', PROMETHEUS_TEXT])
    await expect(listen({ fetch: open, close: () => undefined }, { host: '0.0.0.0', port: 0 })).rejects.toThrow(UnsafeBindError)

    const guarded = metricsHandler(metrics.registry, { authorize: bearerTokens(TOKENS), scopes: ['monitoring'] })
    const onPublic = await listen({ fetch: guarded, close: () => undefined }, { host: '0.0.0.0', port: 0, authenticated: true })
    opened.push(onPublic)
    const c = client(onPublic.url.replace('0.0.0.0', '127.0.0.1'))
    expect((await c.get('/metrics')).status).toBe(401)
    expect((await c.get('/metrics', TOKEN_OPS)).status).toBe(403)
    expect((await c.get('/metrics', TOKEN_MON)).status).toBe(200)
    expect((await c.call('DELETE', '/metrics', { token: TOKEN_MON })).status).toBe(405)
  })

  it('refuses unknown and bad options of metricsHandler and createApi', () => {
    const runner: Runner = h.runner()
    const metrics = createMetrics({ runner })
    opened.push(metrics)
    expect(() => metricsHandler(metrics.registry, { bogus: 1 } as never)).toThrow(ConfigError)
    expect(() => metricsHandler(metrics.registry, { bogus: 1 } as never)).toThrow(/unknown option "bogus"/)
    expect(() => metricsHandler(metrics.registry, { authorize: bearerTokens(TOKENS) })).toThrow(/scopes/)
    expect(() => metricsHandler(metrics.registry, { scopes: [''] })).toThrow(/scopes/)
    expect(() => metricsHandler({} as never)).toThrow(/metrics source/)
    expect(() => createApi({ runner, metrics: {} as never })).toThrow(/metrics/)
    for (const metricsScope of ['', 'x'.repeat(257), 7]) expect(() => createApi({ runner, metricsScope: metricsScope as string })).toThrow(/metricsScope/)
  })
})
