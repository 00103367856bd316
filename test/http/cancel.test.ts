import { expect, it } from 'vitest'
import { defineKind } from 'jobtable'
import { bearerTokens } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { aborted, gate, track } from '../support/wait.js'
import { servers } from './client.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_B = 'token-for-household-b-0002'
const MISSING = '00000000-0000-4000-8000-000000000000'
const JOB_KEYS = ['id', 'kind', 'status', 'result', 'error', 'attempt', 'maxAttempts', 'priority', 'runAt']

describeEachBackend('HTTP cancel', (backend) => {
  const h = harness(backend)
  const s = servers()

  /**
   * A started runner serving its API on a loopback port: `held` jobs
   * record their signal and return `{ n }` once it aborts (or once
   * `release` opens), `echo` jobs return at once, and `unhandled` jobs
   * stay queued (no runner here has a handler for them).
   */
  async function setup(options: { scoped?: boolean } = {}) {
    const runner = h.runner({ workers: 2 })
    const release = gate()
    const signals = new Map<string, AbortSignal>()
    const held = runner.register('held', {
      payload: echoPayload,
      result: (r: { n: number }) => r,
      handler: async ({ n }, job) => {
        signals.set(job.id, job.signal)
        await Promise.race([aborted(job.signal), release.promise])
        return { n }
      },
    })
    const echo = runner.register('echo', { payload: echoPayload, result: (n: number) => ({ n }), failures: ['nope'], handler: ({ n }, job) => (n < 0 ? job.fail('nope') : n) })
    const unhandled = runner.register(defineKind('unhandled', { payload: echoPayload }))
    const done = track(runner)
    await runner.start()
    const api = await s.serve(runner, options.scoped ? { authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_B]: 'household-b' }) } : {})
    const cancel = (id: string, token?: string) => api.call('POST', `/api/v1/jobs/${id}/cancel`, { token })
    return { runner, api, held, echo, unhandled, done, release, signals, cancel }
  }

  it('a queued or a scheduled job: 200 with the job, cancelled; GET shows it cancelled; list by status finds it', async () => {
    const { api, runner, unhandled, held, done, cancel } = await setup()
    const queued = await unhandled.enqueue({ n: 1 })
    const scheduled = await held.enqueue({ n: 2 }, { delayMs: 3_600_000 })
    for (const [id, kind, runAt] of [
      [queued, 'unhandled', null],
      [scheduled, 'held', (await runner.get(scheduled)).runAt],
    ] as const) {
      const a = await cancel(id)
      expect(a.status).toBe(200)
      expect(a.headers.get('content-type')).toBe('application/json')
      expect(Object.keys(a.json)).toEqual(JOB_KEYS)
      expect(a.json).toEqual({ id, kind, status: 'cancelled', result: null, error: null, attempt: 0, maxAttempts: 1, priority: 0, runAt })
      expect((await api.get(`/api/v1/jobs/${id}`)).json).toEqual(a.json)
    }
    expect((await api.get('/api/v1/jobs?status=cancelled')).json.jobs.map((j: { id: string }) => j.id).sort()).toEqual([queued, scheduled].sort())
    done.stop()
  })

  it('a running job: 202 with the job, still running, its signal aborted; it then ends cancelled with the result its handler returned', async () => {
    const { api, held, done, signals, cancel } = await setup()
    const id = await held.enqueue({ n: 7 })
    await done.starts(1)
    const a = await cancel(id)
    expect(a.status).toBe(202)
    expect(Object.keys(a.json)).toEqual(JOB_KEYS)
    expect(a.json).toMatchObject({ id, kind: 'held', status: 'running', error: null, attempt: 1 })
    expect(signals.get(id)!.aborted).toBe(true)
    await done.ends([id])
    expect((await api.get(`/api/v1/jobs/${id}`)).json).toMatchObject({ id, status: 'cancelled', result: { n: 7 }, error: null })
    // Asked again once finished: 409.
    expect((await cancel(id)).json.code).toBe('job_finished')
    done.stop()
  })

  it('a finished job: 409 job_finished, and the job is unchanged', async () => {
    const { api, echo, unhandled, done, cancel } = await setup()
    const [succeeded, failed] = [await echo.enqueue({ n: 1 }), await echo.enqueue({ n: -1 })]
    await done.ends([succeeded!, failed!])
    const cancelled = await unhandled.enqueue({ n: 1 })
    expect((await cancel(cancelled)).status).toBe(200)
    for (const id of [succeeded!, failed!, cancelled]) {
      const before = (await api.get(`/api/v1/jobs/${id}`)).text
      const a = await cancel(id)
      expect([a.status, a.json.code]).toEqual([409, 'job_finished'])
      expect(a.text).not.toContain(id)
      expect((await api.get(`/api/v1/jobs/${id}`)).text).toBe(before)
    }
    expect((await api.get(`/api/v1/jobs/${succeeded}`)).json).toMatchObject({ status: 'succeeded', result: { n: 1 } })
    expect((await api.get(`/api/v1/jobs/${failed}`)).json).toMatchObject({ status: 'failed', error: 'nope' })
    done.stop()
  })

  it('another scope’s job, queued, running or finished, answers 404 exactly as a missing one and is left alone; the owner cancels it; no token is 401', async () => {
    const { api, runner, held, unhandled, done, release, signals, cancel } = await setup({ scoped: true })
    const queued = await unhandled.enqueue({ n: 1 }, { scope: 'household-a' })
    const running = await held.enqueue({ n: 2 }, { scope: 'household-a' })
    await done.starts(1)
    const missing = await cancel(MISSING, TOKEN_B)
    expect([missing.status, missing.json.code]).toEqual([404, 'not_found'])
    for (const id of [queued, running]) {
      const a = await cancel(id, TOKEN_B)
      expect(a.status).toBe(404)
      expect(a.text).toBe(missing.text)
      const anonymous = await cancel(id)
      expect([anonymous.status, anonymous.json.code, anonymous.headers.get('www-authenticate')]).toEqual([401, 'unauthenticated', 'Bearer'])
    }
    expect((await runner.get(queued)).status).toBe('queued')
    expect(signals.get(running)!.aborted).toBe(false)
    release.open()
    await done.ends([running])
    expect((await runner.get(running)).status).toBe('succeeded')
    // Finished, it is still another scope's: 404 as a missing one, never 409.
    expect((await cancel(running, TOKEN_B)).text).toBe(missing.text)
    expect([(await cancel(running, TOKEN_A)).json.code]).toEqual(['job_finished'])

    const own = await cancel(queued, TOKEN_A)
    expect([own.status, own.json.status]).toEqual([200, 'cancelled'])
    done.stop()
  })

  it('a missing job is 404 not_found, a malformed id 400 invalid_id; GET and other methods on the path are 405 with Allow: POST', async () => {
    const { unhandled, runner, api, cancel } = await setup()
    const missing = await cancel(MISSING)
    expect([missing.status, missing.json.code]).toEqual([404, 'not_found'])
    for (const bad of ['not-an-id', '1234', `${MISSING}x`]) {
      const a = await cancel(bad)
      expect([a.status, a.json.code]).toEqual([400, 'invalid_id'])
    }
    const id = await unhandled.enqueue({ n: 1 })
    for (const method of ['GET', 'PUT', 'DELETE', 'PATCH']) {
      const a = await api.call(method, `/api/v1/jobs/${id}/cancel`)
      expect([a.status, a.json.code, a.headers.get('allow')], method).toEqual([405, 'method_not_allowed', 'POST'])
    }
    expect((await runner.get(id)).status).toBe('queued')
  })
})
