import { expect } from 'vitest'
import { client, type Answer } from '../../http/client.js'
import { HANDLER_WAYS, KIND_WAYS, REFUSED } from './secrets-kinds.js'

/**
 * An API client that keeps every answer it hears (status, headers and
 * body, event streams included), so the test can search all of them.
 */
export function recorder(base: string, token?: string) {
  const api = client(base)
  const heard: string[] = []
  const keep = (what: string, a: { status: number; headers: Headers }, body: string) => {
    const headers: string[] = []
    a.headers.forEach((value, name) => headers.push(`${name}: ${value}`))
    heard.push(`${what} -> ${a.status}\n${headers.join('\n')}\n\n${body}`)
  }
  const call = async (method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}): Promise<Answer> => {
    const a = await api.call(method, path, { ...init, ...(token === undefined || init.headers?.authorization !== undefined ? {} : { token }) })
    // The request's own query is left out: some carry the marker on purpose.
    keep(`${method} ${path.split('?')[0]}`, a, a.text)
    return a
  }
  return {
    heard,
    call,
    get: (path: string) => call('GET', path),
    post: (body: unknown) => call('POST', '/api/v1/jobs', { body: JSON.stringify(body) }),
    /** Reads a job's whole event stream (it ends after a terminal status). */
    async events(id: string): Promise<string[]> {
      const stream = await api.events(id, token)
      const events = await stream.rest()
      const data = events.map((e) => `event: ${e.event}\ndata: ${e.data}`)
      keep(`GET /api/v1/jobs/${id}/events`, stream.response, data.join('\n\n'))
      return data
    },
  }
}

export type Recorder = ReturnType<typeof recorder>

/** What a job of the scenario must end as. */
export interface Expected {
  readonly way: string
  readonly status: string
  readonly error?: string | null
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled'])

/** Polls a job through the API until ok says so. */
export async function until(api: Recorder, id: string, ok: (job: { status: string; result: unknown; error: string | null }) => boolean) {
  for (;;) {
    const a = await api.get(`/api/v1/jobs/${id}`)
    expect(a.status).toBe(200)
    if (ok(a.json)) return a.json as { status: string; result: unknown; error: string | null; attempt: number }
    await new Promise((r) => setTimeout(r, 25))
  }
}

/**
 * Runs every way of letting the marker out that goes through the HTTP
 * API: each handler way as a job of `leaky`, each kind of its own, the
 * control jobs, and the enqueues a validator, the parser or the database
 * refuses while quoting the value. Waits for every job to end, reads each
 * one's event stream and the metrics, and checks each job ended as it
 * must. Resolves to the jobs and what each ended as, and how many
 * requests were refused.
 */
export async function exercise(api: Recorder, marker: string, control: string, options: { metrics: boolean }): Promise<{ jobs: Map<string, Expected>; refused: number }> {
  const jobs = new Map<string, Expected>()
  const enqueue = async (body: unknown, expected: Omit<Expected, 'way'>, way: string) => {
    const a = await api.post(body)
    expect(a.status, way).toBe(201)
    jobs.set(a.json.id, { way, ...expected })
    return a.json.id as string
  }
  const internal = { status: 'failed', error: 'internal_error' }
  for (const way of Object.keys(HANDLER_WAYS)) {
    if (way === 'a throw after abort (stop)' || way === 'a throw after cancel') continue
    const declared = way === 'declared code carrying the marker'
    await enqueue({ kind: 'leaky', payload: { way } }, declared ? { status: 'failed', error: 'declared_code' } : internal, way)
  }
  await enqueue({ kind: 'leaky_retry', payload: {} }, { status: 'succeeded', error: null }, KIND_WAYS.leaky_retry!)
  await enqueue({ kind: 'leaky_timeout', payload: {} }, { status: 'failed', error: 'timeout' }, KIND_WAYS.leaky_timeout!)
  await enqueue({ kind: 'leaky_timeout_late', payload: {} }, { status: 'failed', error: 'timeout' }, KIND_WAYS.leaky_timeout_late!)
  await enqueue({ kind: 'leaky_projection', payload: {} }, internal, KIND_WAYS.leaky_projection!)
  await enqueue({ kind: 'leaky_result_schema', payload: {} }, internal, KIND_WAYS.leaky_result_schema!)
  await enqueue({ kind: `control ${control}`, payload: { text: control, fail: false } }, { status: 'succeeded', error: null }, 'control')
  await enqueue({ kind: `control ${control}`, payload: { text: control, fail: true } }, { status: 'failed', error: 'control_failure' }, 'control, failing')

  // A throw after cancel: cancelled while its handler waits on its signal, watched on its event stream.
  const cancelled = await enqueue({ kind: 'leaky', payload: { way: 'a throw after cancel' } }, { status: 'cancelled' }, 'a throw after cancel')
  await until(api, cancelled, (j) => j.status === 'running')
  const watching = api.events(cancelled)
  expect((await api.call('POST', `/api/v1/jobs/${cancelled}/cancel`)).status).toBe(202)
  await watching

  // Enqueues refused while the refusal quotes the value: each answered with a code, storing nothing.
  const refusals: [string, { body?: string; path?: string; method?: string }, number][] = [
    ['a zod message quoting the value', { body: JSON.stringify({ kind: 'leaky_zod', payload: { text: marker } }) }, 422],
    ['a valibot message quoting the value', { body: JSON.stringify({ kind: 'leaky_valibot', payload: { n: marker } }) }, 422],
    ['a validator that throws the value as its message, name and code', { body: JSON.stringify({ kind: 'leaky_throwing_validator', payload: { text: marker } }) }, 500],
    ['a validator that throws an object throwing the value at every look', { body: JSON.stringify({ kind: 'leaky_touchy_validator', payload: { text: 'x' } }) }, 500],
    ['a payload the database refuses, quoting it', { body: JSON.stringify({ kind: 'leaky_text', payload: { text: `${REFUSED} ${marker}` } }) }, 500],
    ['a field of the wrong type beside an unknown one', { body: JSON.stringify({ kind: 'leaky_text', payload: { text: 5, extra: marker } }) }, 422],
    ['malformed JSON', { body: `{"kind":"leaky_text","payload":{"text":"${marker}"` }, 400],
    ['a body that is a string', { body: JSON.stringify(marker) }, 400],
    ['an unknown kind', { body: JSON.stringify({ kind: marker, payload: {} }) }, 422],
    ['a unique key with a NUL', { body: JSON.stringify({ kind: 'leaky_text', payload: { text: 'x' }, uniqueKey: `${marker}\u0000` }) }, 400],
    ['an unknown field of the body', { body: JSON.stringify({ kind: 'leaky_text', payload: { text: 'x' }, note: marker }) }, 400],
    ['a status filter', { method: 'GET', path: `/api/v1/jobs?status=${encodeURIComponent(marker)}` }, 400],
    ['a cursor', { method: 'GET', path: `/api/v1/jobs?cursor=${encodeURIComponent(marker)}` }, 400],
    ['a limit', { method: 'GET', path: `/api/v1/jobs?limit=${encodeURIComponent(marker)}` }, 400],
    ['an unknown list parameter', { method: 'GET', path: `/api/v1/jobs?secret=${encodeURIComponent(marker)}` }, 400],
    ['a stats parameter', { method: 'GET', path: `/api/v1/stats?secret=${encodeURIComponent(marker)}` }, 400],
  ]
  for (const [what, { body, path = '/api/v1/jobs', method = 'POST' }, status] of refusals) {
    const a = await api.call(method, path, body === undefined ? {} : { body })
    expect(a.status, what).toBe(status)
  }
  // A kind filter is a filter: nothing matches.
  expect((await api.get(`/api/v1/jobs?kind=${encodeURIComponent(marker)}`)).json.jobs).toEqual([])

  for (const id of jobs.keys()) await until(api, id, (j) => TERMINAL.has(j.status))
  for (const [id, expected] of jobs) {
    const job = (await api.get(`/api/v1/jobs/${id}`)).json
    expect({ way: expected.way, status: job.status, ...('error' in expected ? { error: job.error } : {}) }).toEqual(expected)
    if (expected.way === KIND_WAYS.leaky_retry) expect(job.attempt).toBe(3)
    await api.events(id)
  }
  await api.get('/api/v1/jobs?limit=1000')
  await api.get('/api/v1/stats')
  if (options.metrics) expect((await api.get('/metrics')).status).toBe(200)
  return { jobs, refused: refusals.length }
}
