import { describe, expect, it } from 'vitest'
import { defineKind } from 'jobtable'
import { sqliteBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'
import { servers } from './client.js'

// Definitions as a web process and a worker process share them.
const exposed = defineKind('k', { payload: echoPayload, result: (r: { doubled: number }) => r, enqueueOverHttp: true })
const internal = defineKind('internal', { payload: echoPayload })

describe('HTTP API of a producer (a runner with definitions only, never started)', () => {
  const h = harness(sqliteBackend)
  const s = servers()

  it('enqueues a kind the producer knows over HTTP; a worker on the same file runs it, and the producer reads it back succeeded', async () => {
    const web = h.runner()
    web.register(exposed)
    web.register(internal)
    expect(web.kind('k')).toEqual({ name: 'k', enqueueOverHttp: true, handled: false, failures: [] })
    const api = await s.serve(web)

    const created = await api.post({ kind: 'k', payload: { n: 21 } })
    expect(created.status).toBe(201)
    expect(created.json).toMatchObject({ kind: 'k', status: 'queued', result: null, error: null })
    const id: string = created.json.id
    expect(created.headers.get('location')).toBe(`/api/v1/jobs/${id}`)
    expect((await api.get(`/api/v1/jobs/${id}`)).json).toMatchObject({ id, kind: 'k', status: 'queued', result: null, error: null })

    // Refused as before: a kind not exposed over HTTP answers exactly as one nobody registered, storing nothing.
    const hidden = await api.post({ kind: 'internal', payload: { n: 1 } })
    const unknown = await api.post({ kind: 'nope', payload: { n: 1 } })
    expect(hidden.status).toBe(422)
    expect(hidden.json.code).toBe('unknown_kind')
    expect(hidden.text).toBe(unknown.text)
    expect((await web.list()).jobs.map((j) => j.id)).toEqual([id])

    // A worker, as another process would be: its own connection to the file, the handler, started.
    const worker = h.runner({ driver: h.store.driver() })
    worker.register(exposed, ({ n }) => ({ doubled: 2 * n }))
    const done = track(worker)
    try {
      await worker.start()
      await done.ends([id])
    } finally {
      done.stop()
    }
    expect((await api.get(`/api/v1/jobs/${id}`)).json).toMatchObject({ id, kind: 'k', status: 'succeeded', result: { doubled: 42 }, error: null })
    expect(done.started).toEqual([id])
  })
})
