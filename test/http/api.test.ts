import { request as httpRequest } from 'node:http'
import { connect } from 'node:net'
import { expect, it } from 'vitest'
import { z } from 'zod'
import { openApiDocument, openApiDocumentFor, PROBLEMS } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate, track } from '../support/wait.js'
import { servers } from './client.js'

const MARKER = 'SECRET-MARKER-7f3a'
const MISSING = '00000000-0000-4000-8000-000000000000'

describeEachBackend('HTTP API', (backend) => {
  const h = harness(backend)
  const s = servers()

  /** A runner with an HTTP-enqueueable echo kind and a hidden one, started. */
  async function setup(options: { bodyLimitBytes?: number; start?: boolean } = {}) {
    const runner = h.runner({ workers: 2 })
    runner.register('echo', { payload: echoPayload, result: (n: number) => ({ n }), handler: ({ n }) => n, enqueueOverHttp: true })
    const hidden = runner.register('hidden', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    if (options.start !== false) await runner.start()
    const api = await s.serve(runner, options.bodyLimitBytes ? { bodyLimitBytes: options.bodyLimitBytes } : {})
    return { runner, api, hidden, done }
  }

  it('enqueues over HTTP (201, Location) and reads the job back with exactly {id, kind, status, result, error, attempt, maxAttempts, priority, runAt}', async () => {
    const { api, done } = await setup()
    const created = await api.post({ kind: 'echo', payload: { n: 7 } })
    expect(created.status).toBe(201)
    expect(Object.keys(created.json)).toEqual(['id', 'kind', 'status', 'result', 'error', 'attempt', 'maxAttempts', 'priority', 'runAt'])
    expect(created.json.kind).toBe('echo')
    expect(created.headers.get('location')).toBe(`/api/v1/jobs/${created.json.id}`)
    await done.ends([created.json.id])
    const read = await api.get(`/api/v1/jobs/${created.json.id}`)
    expect(read.status).toBe(200)
    expect(read.headers.get('content-type')).toBe('application/json')
    expect(read.json).toEqual({ id: created.json.id, kind: 'echo', status: 'succeeded', result: { n: 7 }, error: null, attempt: 1, priority: 0, runAt: null, maxAttempts: 1 })
    expect(Object.keys(read.json)).toEqual(['id', 'kind', 'status', 'result', 'error', 'attempt', 'maxAttempts', 'priority', 'runAt'])
    // An upper-case id is the same id.
    expect((await api.get(`/api/v1/jobs/${created.json.id.toUpperCase()}`)).text).toBe(read.text)
    // HEAD answers as GET, without a body.
    expect((await api.call('HEAD', `/api/v1/jobs/${created.json.id}`)).status).toBe(200)
  })

  it('a second POST with the uniqueKey of a live job stores nothing and answers 200 with that job; a bad key is invalid_request', async () => {
    const { api, runner } = await setup({ start: false })
    const first = await api.post({ kind: 'echo', payload: { n: 1 }, uniqueKey: 'week-49' })
    expect(first.status).toBe(201)
    const second = await api.post({ kind: 'echo', payload: { n: 2 }, uniqueKey: 'week-49' })
    expect(second.status).toBe(200)
    expect(second.json).toEqual(first.json)
    expect(second.headers.get('location')).toBe(`/api/v1/jobs/${first.json.id}`)
    expect((await runner.list({ limit: 10 })).jobs.map((j) => j.id)).toEqual([first.json.id])
    for (const uniqueKey of ['', 7, 'x'.repeat(257), null]) {
      const bad = await api.post({ kind: 'echo', payload: { n: 3 }, uniqueKey })
      expect(bad.status).toBe(400)
      expect(bad.json).toMatchObject({ code: 'invalid_request', issues: [{ path: 'uniqueKey' }] })
    }
    expect((await runner.list({ limit: 10 })).jobs).toHaveLength(1)
  })

  it('answers a kind not exposed over HTTP exactly as one that is not registered', async () => {
    const { api, runner } = await setup()
    const hidden = await api.post({ kind: 'hidden', payload: { n: 1 } })
    const missing = await api.post({ kind: 'no_such_kind', payload: { n: 1 } })
    expect(hidden.status).toBe(422)
    expect(hidden.json.code).toBe('unknown_kind')
    expect(hidden.text).toBe(missing.text)
    expect(hidden.text).not.toContain('hidden')
    expect((await runner.list()).jobs).toEqual([])
  })

  it('refuses an invalid payload naming the failing fields, never their values, and stores nothing', async () => {
    const { api, runner } = await setup()
    const wrongType = await api.post({ kind: 'echo', payload: { n: MARKER } })
    expect(wrongType.status).toBe(422)
    expect(wrongType.json).toMatchObject({ code: 'invalid_payload', issues: [{ path: 'n' }] })
    const unknownField = await api.post({ kind: 'echo', payload: { n: 1, extra: MARKER } })
    expect(unknownField.json).toMatchObject({ code: 'invalid_payload', issues: [{ path: 'extra' }] })
    const notObject = await api.post({ kind: 'echo', payload: MARKER })
    expect(notObject.json.code).toBe('invalid_payload')
    for (const a of [wrongType, unknownField, notObject]) expect(a.text).not.toContain(MARKER)
    expect((await runner.list()).jobs).toEqual([])
  })

  it('refuses malformed JSON without quoting the parser or the body', async () => {
    const { api } = await setup()
    for (const body of [`{"kind": "echo", "payload": ${MARKER}`, '', 'nul', '\u00ff\u00fe']) {
      const a = await api.call('POST', '/api/v1/jobs', { body })
      expect(a.status).toBe(400)
      expect(a.json.code).toBe('malformed_json')
      expect(a.text).not.toContain(MARKER)
      expect(a.text).not.toMatch(/position|JSON at|Unexpected/)
    }
    // Bytes that are not UTF-8 are malformed too.
    const res = await fetch(api.base + '/api/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' }, body: new Uint8Array([0x7b, 0xff, 0x7d]) })
    expect(res.status).toBe(400)
    expect((await res.json()).code).toBe('malformed_json')
  })

  it('refuses a body that is JSON but not {kind, payload}, naming the fields', async () => {
    const { api } = await setup()
    expect((await api.post([1, 2])).json).toMatchObject({ code: 'invalid_request', issues: [{ path: '' }] })
    expect((await api.post({ kind: 'echo' })).json).toMatchObject({ code: 'invalid_request', issues: [{ path: 'payload' }] })
    expect((await api.post({ kind: 3, payload: {} })).json).toMatchObject({ code: 'invalid_request', issues: [{ path: 'kind' }] })
    const extra = await api.post({ kind: 'echo', payload: { n: 1 }, [MARKER]: 1 })
    expect(extra.json).toMatchObject({ code: 'invalid_request', issues: [{ path: MARKER }] }) // the caller's own field name, not a value
    expect(extra.status).toBe(400)
  })

  it('refuses a content type that is not JSON, and compressed bodies, with 415', async () => {
    const { api } = await setup()
    const body = JSON.stringify({ kind: 'echo', payload: { n: 1 } })
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/jsonx']) {
      const a = await api.call('POST', '/api/v1/jobs', { body, headers: { 'content-type': type } })
      expect([a.status, a.json.code]).toEqual([415, 'unsupported_media_type'])
    }
    const gz = await api.call('POST', '/api/v1/jobs', { body, headers: { 'content-encoding': 'gzip' } })
    expect([gz.status, gz.json.code]).toEqual([415, 'unsupported_media_type'])
    // A charset parameter is fine.
    const ok = await api.call('POST', '/api/v1/jobs', { body, headers: { 'content-type': 'application/json; charset=utf-8' } })
    expect(ok.status).toBe(201)
  })

  it('refuses a declared Content-Length over the limit before reading the body', async () => {
    const { api } = await setup({ bodyLimitBytes: 1024 })
    const url = new URL(api.base)
    // Declare 10 MB, send 10 bytes, and never more: the answer must come anyway.
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () => {
        socket.write(`POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n{"kind":"e`)
      })
      let data = ''
      socket.on('data', (chunk) => {
        data += chunk.toString()
        if (data.includes('\r\n\r\n') && data.includes('}')) {
          socket.destroy()
          resolve(data)
        }
      })
      socket.on('error', reject)
    })
    expect(answer).toMatch(/^HTTP\/1\.1 413 /)
    expect(answer).toContain('application/problem+json')
    expect(answer).toContain('"code":"payload_too_large"')
  })

  it('refuses a streamed (chunked) body at the first bytes over the limit', async () => {
    const { api, runner } = await setup({ bodyLimitBytes: 1024 })
    const url = new URL(api.base)
    let sent = 0
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest({ host: url.hostname, port: url.port, method: 'POST', path: '/api/v1/jobs', headers: { 'content-type': 'application/json' } })
      req.on('response', (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      })
      req.on('error', reject)
      // Keep streaming until the server answers: it must not wait for the end.
      const chunk = Buffer.alloc(512, 0x20)
      const pump = () => {
        if (sent > 50 * 1024 * 1024) return reject(new Error('server read 50 MB without answering'))
        sent += chunk.length
        if (req.write(chunk)) setImmediate(pump)
        else req.once('drain', pump)
      }
      req.on('response', () => (sent = Infinity))
      req.write('{"kind":"echo","payload":{"n":1},"pad":"')
      pump()
    })
    expect(status).toBe(413)
    expect((await runner.list()).jobs).toEqual([])
  })

  it('answers a malformed id with 400 invalid_id and an unknown one with 404 not_found, on every job route', async () => {
    const { api } = await setup()
    for (const bad of ['123', 'not-a-uuid', `${MISSING}x`, '00000000-0000-1000-8000-000000000000']) {
      for (const suffix of ['', '/events']) {
        const a = await api.get(`/api/v1/jobs/${bad}${suffix}`)
        expect([a.status, a.json.code], bad + suffix).toEqual([400, 'invalid_id'])
      }
    }
    const missing = await api.get(`/api/v1/jobs/${MISSING}`)
    expect([missing.status, missing.json.code]).toEqual([404, 'not_found'])
    expect((await api.get(`/api/v1/jobs/${MISSING}/events`)).text).toBe(missing.text)
    // Ids are version 7 now; version 4 ids (MISSING) of jobs stored before stay valid.
    expect((await api.get('/api/v1/jobs/00000000-0000-7000-8000-000000000000')).text).toBe(missing.text)
  })

  it('answers unknown routes with 404 route_not_found and wrong methods with 405 and Allow', async () => {
    const { api } = await setup()
    for (const path of ['/', '/api', '/api/v1', '/api/v1/jobs/', '/api/v2/jobs', `/api/v1/jobs/${MISSING}/other`]) {
      const a = await api.get(path)
      expect([a.status, a.json.code], path).toEqual([404, 'route_not_found'])
    }
    const cases: [string, string, string][] = [
      ['DELETE', '/api/v1/jobs', 'GET, HEAD, POST'],
      ['PUT', '/api/v1/jobs', 'GET, HEAD, POST'],
      ['POST', `/api/v1/jobs/${MISSING}`, 'GET, HEAD'],
      ['DELETE', `/api/v1/jobs/${MISSING}`, 'GET, HEAD'],
      ['POST', `/api/v1/jobs/${MISSING}/events`, 'GET, HEAD'],
      ['POST', '/api/v1/openapi.json', 'GET, HEAD'],
      ['OPTIONS', '/api/v1/jobs', 'GET, HEAD, POST'],
    ]
    for (const [method, path, allow] of cases) {
      const a = await api.call(method, path)
      expect([a.status, a.json.code, a.headers.get('allow')], `${method} ${path}`).toEqual([405, 'method_not_allowed', allow])
    }
  })

  it('lists jobs newest first, page by page with an opaque cursor, with status and kind filters', async () => {
    const { api, runner, hidden, done } = await setup()
    const ids: string[] = []
    for (let n = 0; n < 23; n++) ids.push((await api.post({ kind: 'echo', payload: { n } })).json.id)
    const hiddenId = await hidden.enqueue({ n: 0 })
    await done.ends([...ids, hiddenId])
    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const page = await api.get(`/api/v1/jobs?kind=echo&limit=5${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
      expect(page.status).toBe(200)
      expect(page.json.jobs.length).toBeLessThanOrEqual(5)
      seen.push(...page.json.jobs.map((j: { id: string }) => j.id))
      cursor = page.json.nextCursor
      pages++
    } while (cursor !== null)
    expect(pages).toBe(5)
    expect(seen).toEqual([...ids].reverse())
    const all = await api.get('/api/v1/jobs')
    expect(all.json.jobs[0].id).toBe(hiddenId) // reading is not limited to HTTP-enqueueable kinds
    expect((await api.get('/api/v1/jobs?status=queued')).json.jobs).toEqual([])
    expect((await api.get('/api/v1/jobs?status=succeeded&limit=1000')).json.jobs).toHaveLength(24)
    expect((await runner.list({ limit: 1000 })).jobs).toHaveLength(24)
  })

  it('refuses bad list parameters with 400', async () => {
    const { api } = await setup()
    for (const q of ['limit=0', 'limit=1001', 'limit=abc', 'limit=1.5', 'limit=-1', 'status=done', 'kind=', 'stauts=queued', 'limit=1&limit=2']) {
      const a = await api.get(`/api/v1/jobs?${q}`)
      expect([a.status, a.json.code], q).toEqual([400, 'invalid_argument'])
    }
    for (const cursor of ['garbage', MARKER, Buffer.from('p-1').toString('base64url'), 'x'.repeat(100)]) {
      const a = await api.get(`/api/v1/jobs?cursor=${cursor}`)
      expect([a.status, a.json.code], cursor).toEqual([400, 'invalid_cursor'])
      expect(a.text).not.toContain(MARKER)
    }
  })

  it('serves an OpenAPI 3.1 document listing every route and every problem code', async () => {
    const { api } = await setup()
    const doc = await api.get('/api/v1/openapi.json')
    expect(doc.status).toBe(200)
    expect(doc.json.openapi).toBe('3.1.0')
    // The document of this runner's kinds: `echo` may be enqueued over HTTP, `hidden` may not, and is not in it.
    expect(doc.json).toEqual(JSON.parse(JSON.stringify(openApiDocumentFor([{ name: 'echo', payload: echoPayload }]))))
    expect(doc.json.components.schemas.EnqueueRequest.discriminator.mapping).toEqual({ echo: '#/components/schemas/Enqueue_echo' })
    expect(doc.text).not.toContain('hidden')
    expect({ ...doc.json, components: undefined }).toEqual(JSON.parse(JSON.stringify({ ...openApiDocument, components: undefined })))
    expect(Object.keys(doc.json.paths).sort()).toEqual([
      '/api/v1/activity',
      '/api/v1/cooldowns',
      '/api/v1/cooldowns/{key}',
      '/api/v1/jobs',
      '/api/v1/jobs/{id}',
      '/api/v1/jobs/{id}/cancel',
      '/api/v1/jobs/{id}/events',
      '/api/v1/jobs/{id}/retry',
      '/api/v1/kinds/paused',
      '/api/v1/kinds/{kind}/pause',
      '/api/v1/kinds/{kind}/resume',
      '/api/v1/openapi.json',
      '/api/v1/rate-limits',
      '/api/v1/schedules',
      '/api/v1/stats',
      '/metrics',
    ])
    expect(doc.json.components.schemas.Problem.properties.code.enum.sort()).toEqual(Object.keys(PROBLEMS).sort())
  })

  it('answers a busy store with 503 unavailable and Retry-After, and any other failure with a bare 500', async () => {
    const runner = h.runner({ workers: 1 })
    const faulty = new FaultyDriver(h.store.driver())
    const r2 = h.runner({ driver: faulty.driver })
    r2.register('echo', { payload: echoPayload, handler: () => undefined, enqueueOverHttp: true })
    void runner
    const api = await s.serve(r2)
    faulty.failNth('jobGet', 1)
    const busy = await api.get(`/api/v1/jobs/${MISSING}`)
    expect([busy.status, busy.json.code, busy.headers.get('retry-after')]).toEqual([503, 'unavailable', '1'])
    faulty.failNth('jobGet', 1, () => new Error(`connection to postgres://user:${MARKER}@db failed`))
    const broken = await api.get(`/api/v1/jobs/${MISSING}`)
    expect([broken.status, broken.json.code]).toEqual([500, 'internal_error'])
    expect(broken.text).not.toContain(MARKER)
    const throwing = await s.serve(r2, {
      authorize: () => {
        throw new Error(MARKER)
      },
    })
    const refused = await throwing.get('/api/v1/jobs')
    expect([refused.status, refused.json.code]).toEqual([500, 'internal_error'])
    expect(refused.text).not.toContain(MARKER)
  })

  it('streams a job as Server-Sent Events: status, each partial result, ending at the terminal state', async () => {
    const runner = h.runner({ workers: 1 })
    // The last gate holds the final result until step 2 has been seen: a poll
    // shows the latest state, so a partial overtaken by the final write before
    // the next poll is coalesced into it.
    const steps = [gate(), gate(), gate(), gate()]
    runner.register('steps', {
      payload: z.strictObject({}),
      result: (r: { step: number }) => r,
      enqueueOverHttp: true,
      handler: async (_p, job) => {
        for (let step = 0; step < 3; step++) {
          await steps[step]!.promise
          await job.publish({ step })
        }
        await steps[3]!.promise
        return { step: 99 }
      },
    })
    await runner.start()
    const api = await s.serve(runner, { eventsPollMs: 20 })
    const id = (await api.post({ kind: 'steps', payload: {} })).json.id
    const stream = await api.events(id)
    expect(stream.response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8')
    const seen: { status: string; result: unknown }[] = []
    // Release each step only once the previous state has been seen: no timing involved.
    for (;;) {
      const e = await stream.next()
      if (!e) break
      expect(e.event).toBe('job')
      const job = JSON.parse(e.data)
      expect(Object.keys(job)).toEqual(['id', 'kind', 'status', 'result', 'error', 'attempt', 'maxAttempts', 'priority', 'runAt'])
      seen.push({ status: job.status, result: job.result })
      if (job.status === 'running') {
        const next = job.result === null ? 0 : job.result.step + 1
        steps[next]?.open()
      }
    }
    const results = seen.map((j) => j.result)
    expect(results).toContainEqual({ step: 0 })
    expect(results).toContainEqual({ step: 1 })
    expect(results).toContainEqual({ step: 2 })
    expect(seen.at(-1)).toEqual({ status: 'succeeded', result: { step: 99 } })
    // No two consecutive events are the same state.
    for (let i = 1; i < seen.length; i++) expect(seen[i]).not.toEqual(seen[i - 1])
  })

  it('ends an event stream at once for a job already finished, and answers HEAD without a stream', async () => {
    const { api, done } = await setup()
    const id = (await api.post({ kind: 'echo', payload: { n: 5 } })).json.id
    await done.ends([id])
    const events = await (await api.events(id)).rest()
    expect(events).toHaveLength(1)
    expect(JSON.parse(events[0]!.data)).toMatchObject({ id, status: 'succeeded', result: { n: 5 } })
    const head = await api.call('HEAD', `/api/v1/jobs/${id}/events`)
    expect([head.status, head.text]).toEqual([200, ''])
  })

  it('ends open event streams when the server closes', async () => {
    const { api } = await setup({ start: false }) // no workers: the job stays queued
    const id = (await api.post({ kind: 'echo', payload: { n: 1 } })).json.id
    const stream = await api.events(id)
    expect(JSON.parse((await stream.next())!.data).status).toBe('queued')
    // Closing the server must end the stream rather than wait for the job to finish.
    const [rest] = await Promise.all([stream.rest(), api.close()])
    expect(rest.map((e) => JSON.parse(e.data).status)).toEqual(['queued'])
  })
})
