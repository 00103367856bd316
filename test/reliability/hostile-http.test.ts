import { connect, type Socket } from 'node:net'
import { expect, it } from 'vitest'
import { z } from 'zod'
import { createApi, listen } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { client, servers } from '../http/client.js'
import { until } from '../support/wait.js'

/** 300 ids a hostile caller sends, built from traversal, NUL, length, encodings and unicode. */
function hostileIds(): string[] {
  const seeds = [
    '..', '../', '../../etc/passwd', '..%2F..%2Fetc%2Fpasswd', '%2e%2e%2f', '%00', 'abc%00def', '%ff%fe', '%c0%ae%c0%ae%2f',
    'x'.repeat(10 * 1024), '0190a000-0000-7000-8000-00000000000g', '0190A000-0000-7000-8000-000000000000%00', '{id}', '%7Bid%7D',
    "' OR 1=1 --", '"; DROP TABLE jobs; --', '__proto__', 'constructor', 'prototype', 'null', 'undefined', 'NaN', '-1', '1e309',
    encodeURIComponent('💥'), encodeURIComponent('\u202eevil'), encodeURIComponent('Ω≈ç√'), encodeURIComponent('\ud800'.slice(0, 0) + 'é'), '%E2%80%AE', '%F0%9F%92%A5',
    'a%20b', 'a+b', '%20', '%09', '%0d%0aSet-Cookie:%20x=1', 'a;b', 'a,b', '*', '%2A', '~', '.', '%2e', 'CON', 'aux.txt',
  ]
  const ids: string[] = []
  for (let i = 0; ids.length < 300; i++) {
    const seed = seeds[i % seeds.length]!
    const round = Math.floor(i / seeds.length)
    ids.push(round === 0 ? seed : round % 2 === 1 ? `${seed}${round}` : `${round}${seed}`)
  }
  return ids
}

const loose = z.looseObject({})

describeEachBackend('hostile HTTP input', (backend) => {
  const h = harness(backend)
  const s = servers()

  const setup = async () => {
    const runner = h.runner()
    runner.register('echo', { payload: loose, result: (r: unknown) => r, handler: (payload) => payload, enqueueOverHttp: true })
    await runner.start()
    return { runner, api: await s.serve(runner) }
  }

  it('300 hostile ids on every job route: no 5xx, each a 4xx problem', async () => {
    const { api } = await setup()
    for (const id of hostileIds()) {
      for (const [method, suffix] of [['GET', ''], ['GET', '/events'], ['POST', '/cancel']] as const) {
        const a = await api.call(method, `/api/v1/jobs/${id}${suffix}`)
        // 400 invalid_id or 404; a path the URL parser folds (`..`) may name another route: 404 or 405. Never a 5xx.
        expect([400, 404, 405], `${method} ${id.slice(0, 40)}${suffix}`).toContain(a.status)
      }
    }
  })

  it('__proto__, constructor and prototype at depth in payloads, unique keys and query strings: the payload round-trips, no 5xx, Object.prototype untouched', async () => {
    const { api, runner } = await setup()
    // constructor and prototype are ordinary keys: stored, run and read back as they were sent.
    const text = '{"kind":"echo","payload":{"a":{"constructor":{"prototype":{"polluted":2}},"b":[{"prototype":{"x":3}}]},"constructor":"c"},"uniqueKey":"constructor"}'
    const created = await api.call('POST', '/api/v1/jobs', { body: text })
    expect(created.status).toBe(201)
    await until(runner, created.json.id, (j) => j.status === 'succeeded')
    const job = (await api.get(`/api/v1/jobs/${created.json.id}`)).json as { status: string; result: unknown }
    // The handler echoed its payload as its result: every key came back as an own property.
    // (PostgreSQL's jsonb orders keys its own way: compared as values.)
    expect(job.result).toEqual(JSON.parse(text).payload)
    // __proto__ where the schema reads the object: zod drops the key, and jobtable refuses a payload its schema changed, naming the path.
    const refused = await api.call('POST', '/api/v1/jobs', { body: '{"kind":"echo","payload":{"__proto__":{"polluted":1}}}' })
    expect([refused.status, refused.json.code]).toEqual([422, 'invalid_payload'])
    expect(JSON.stringify(refused.json.issues)).toContain('__proto__')
    // Deeper, where the schema passes values through unread: kept as an own key, stored and read back as sent, polluting nothing.
    const deep = await api.call('POST', '/api/v1/jobs', { body: '{"kind":"echo","payload":{"a":{"b":[{"__proto__":{"polluted":1}}]}}}' })
    expect(deep.status).toBe(201)
    await until(runner, deep.json.id, (j) => j.status === 'succeeded')
    const deepJob = (await api.get(`/api/v1/jobs/${deep.json.id}`)).json as { status: string; result: unknown }
    expect(JSON.stringify(deepJob.result)).toBe('{"a":{"b":[{"__proto__":{"polluted":1}}]}}')
    for (const q of ['__proto__[polluted]=1', 'constructor[prototype][polluted]=1', 'kind=__proto__', 'status=__proto__', '__proto__=1', 'cursor=__proto__', 'kind=constructor&limit=1']) {
      const a = await api.get(`/api/v1/jobs?${q}`)
      expect(a.status, q).toBeLessThan(500)
    }
    for (const key of ['__proto__', 'constructor', 'prototype']) {
      const a = await api.call('POST', '/api/v1/jobs', { body: JSON.stringify({ kind: 'echo', payload: {}, uniqueKey: key }) })
      expect(a.status, key).toBeLessThan(500)
    }
    const body = await api.call('POST', '/api/v1/jobs', { body: '{"__proto__":{"kind":"echo"},"payload":{}}' })
    expect([body.status, body.json.code]).toEqual([400, 'invalid_request'])
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined()
    expect(Object.keys(Object.prototype)).toEqual([])
    expect(Object.getOwnPropertyNames(Object.prototype).filter((k) => ['polluted', 'x', 'kind'].includes(k))).toEqual([])
  })

  it('a body declared in a charset other than UTF-8 is refused with 415, whatever its bytes', async () => {
    const { api } = await setup()
    const body = JSON.stringify({ kind: 'echo', payload: { n: 1 } })
    for (const charset of ['latin1', 'iso-8859-1', 'utf-16', 'UTF-16LE', 'windows-1252', 'ascii', 'utf-7']) {
      const a = await api.call('POST', '/api/v1/jobs', { body, headers: { 'content-type': `application/json; charset=${charset}` } })
      expect([a.status, a.json.code], charset).toEqual([415, 'unsupported_media_type'])
    }
    for (const charset of ['utf-8', 'UTF-8', '"utf-8"']) {
      const a = await api.call('POST', '/api/v1/jobs', { body, headers: { 'content-type': `application/json; charset=${charset}` } })
      expect(a.status, charset).toBe(201)
    }
  })

  it('500 slow sockets dribbling a header a byte at a time: the server still answers other clients', async () => {
    const runner = h.runner()
    const listening = await listen(createApi({ runner }), { port: 0 })
    const sockets: Socket[] = []
    const timers: NodeJS.Timeout[] = []
    try {
      const { port } = new URL(listening.url)
      for (let i = 0; i < 500; i++) {
        const socket = connect(Number(port), '127.0.0.1')
        socket.on('error', () => undefined)
        sockets.push(socket)
        const header = 'GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: '
        let at = 0
        timers.push(setInterval(() => socket.write(at < header.length ? header[at++]! : 'a'), 50))
      }
      await Promise.all(sockets.map((socket) => new Promise<void>((resolve) => (socket.readyState === 'open' ? resolve() : socket.once('connect', () => resolve())))))
      for (let i = 0; i < 5; i++) {
        const a = await client(listening.url).get('/api/v1/jobs')
        expect(a.status).toBe(200)
      }
    } finally {
      for (const t of timers) clearInterval(t)
      for (const socket of sockets) socket.destroy()
      await listening.close()
    }
  })
})
