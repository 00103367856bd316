import { expect, it } from 'vitest'
import { bearerTokens } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { endsOf } from '../support/attempts.js'
import { echoPayload, harness } from '../support/harness.js'
import { gate } from '../support/wait.js'
import { servers } from './client.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_B = 'token-for-household-b-0002'
const MISSING = '00000000-0000-4000-8000-000000000000'
const T0 = 1_000_000

describeEachBackend('HTTP retry now and counts', (backend) => {
  const h = harness(backend)
  const s = servers()

  /**
   * A started runner on a clock held at T0 serving its API with two
   * tokens: `work` jobs fail with `bad_input` while `fail` is set, and
   * wait for `hold` when it is set.
   */
  async function setup() {
    const runner = h.runner({ workers: 2, clock: () => T0 })
    const script: { fail: boolean; hold: Promise<void> | undefined; started: () => void } = { fail: true, hold: undefined, started: () => undefined }
    const work = runner.register('work', {
      payload: echoPayload,
      failures: ['bad_input'],
      result: (r: { n: number }) => r,
      handler: async ({ n }, job) => {
        await job.publish({ n })
        script.started()
        if (script.hold) await script.hold
        return script.fail ? job.fail('bad_input') : { n }
      },
    })
    const ends = endsOf(runner)
    await runner.start()
    const api = await s.serve(runner, { authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_B]: 'household-b' }) })
    return { runner, work, ends, api, script }
  }

  it('POST /retry queues a failed job again (200, the job queued, error cleared) and it runs; a scheduled one becomes due now', async () => {
    const { work, ends, api, script } = await setup()
    const id = await work.enqueue({ n: 1 }, { scope: 'household-a' })
    await ends.nth(id, 1)
    expect((await api.get(`/api/v1/jobs/${id}`, TOKEN_A)).json).toMatchObject({ status: 'failed', error: 'bad_input', attempt: 1, maxAttempts: 1 })
    script.fail = false
    const retried = await api.call('POST', `/api/v1/jobs/${id}/retry`, { token: TOKEN_A })
    expect(retried.status).toBe(200)
    expect(retried.json).toMatchObject({ id, error: null, attempt: retried.json.status === 'queued' ? 1 : 2, maxAttempts: 2, runAt: T0 })
    expect(['queued', 'running', 'succeeded']).toContain(retried.json.status)
    await ends.nth(id, 2)
    expect((await api.get(`/api/v1/jobs/${id}`, TOKEN_A)).json).toMatchObject({ status: 'succeeded', attempt: 2, result: { n: 1 } })

    const later = await work.enqueue({ n: 2 }, { scope: 'household-a', delayMs: 3_600_000 })
    expect((await api.get(`/api/v1/jobs/${later}`, TOKEN_A)).json).toMatchObject({ status: 'scheduled', runAt: T0 + 3_600_000 })
    const due = await api.call('POST', `/api/v1/jobs/${later}/retry`, { token: TOKEN_A })
    expect([due.status, due.json.runAt]).toEqual([200, T0])
    await ends.nth(later, 1)
    expect((await api.get(`/api/v1/jobs/${later}`, TOKEN_A)).json.status).toBe('succeeded')
  })

  it('answers 409 job_not_retryable for a queued, running or succeeded job, 409 unique_key_held, and changes nothing', async () => {
    const { runner, work, ends, api, script } = await setup()
    script.fail = false
    const release = gate<void>()
    script.hold = release.promise
    const started = new Promise<void>((resolve) => (script.started = resolve))
    const running = await work.enqueue({ n: 1 }, { scope: 'household-a' })
    await started
    const before = (await api.get(`/api/v1/jobs/${running}`, TOKEN_A)).json
    expect(before.status).toBe('running')
    const refused = await api.call('POST', `/api/v1/jobs/${running}/retry`, { token: TOKEN_A })
    expect([refused.status, refused.json.code]).toEqual([409, 'job_not_retryable'])
    expect((await api.get(`/api/v1/jobs/${running}`, TOKEN_A)).json).toEqual(before)
    release.open()
    await ends.nth(running, 1)
    expect((await api.call('POST', `/api/v1/jobs/${running}/retry`, { token: TOKEN_A })).json.code).toBe('job_not_retryable')

    // A queued job: its kind paused, so it stays queued.
    script.hold = undefined
    await runner.pause('work')
    const queued = await work.enqueue({ n: 2 }, { scope: 'household-a' })
    expect((await api.call('POST', `/api/v1/jobs/${queued}/retry`, { token: TOKEN_A })).json.code).toBe('job_not_retryable')
    expect((await api.get(`/api/v1/jobs/${queued}`, TOKEN_A)).json.status).toBe('queued')
    await runner.cancel(queued)

    // A cancelled job whose unique key a live job now holds.
    const first = await work.enqueue({ n: 3 }, { scope: 'household-a', uniqueKey: 'k' })
    await runner.cancel(first)
    const holder = await work.enqueueUnique({ n: 4 }, { scope: 'household-a', uniqueKey: 'k' })
    expect(holder.created).toBe(true)
    const held = await api.call('POST', `/api/v1/jobs/${first}/retry`, { token: TOKEN_A })
    expect([held.status, held.json.code]).toEqual([409, 'unique_key_held'])
    expect((await api.get(`/api/v1/jobs/${first}`, TOKEN_A)).json.status).toBe('cancelled')
  })

  it("another scope's job and a missing one answer 404 not_found byte for byte; a bad id 400; no token 401; GET 405", async () => {
    const { work, ends, api } = await setup()
    const id = await work.enqueue({ n: 1 }, { scope: 'household-a' })
    await ends.nth(id, 1)
    const other = await api.call('POST', `/api/v1/jobs/${id}/retry`, { token: TOKEN_B })
    const missing = await api.call('POST', `/api/v1/jobs/${MISSING}/retry`, { token: TOKEN_B })
    expect([other.status, other.json.code]).toEqual([404, 'not_found'])
    expect(other.text).toBe(missing.text)
    expect((await api.call('POST', '/api/v1/jobs/not-a-uuid/retry', { token: TOKEN_A })).json.code).toBe('invalid_id')
    expect((await api.call('POST', `/api/v1/jobs/${id}/retry`)).status).toBe(401)
    const get = await api.call('GET', `/api/v1/jobs/${id}/retry`, { token: TOKEN_A })
    expect([get.status, get.headers.get('allow')]).toEqual([405, 'POST'])
    expect((await api.get(`/api/v1/jobs/${id}`, TOKEN_A)).json.status).toBe('failed')
  })

  it("GET /api/v1/stats counts the caller's own jobs only, by kind and status; refuses parameters, a missing token and POST", async () => {
    const { work, ends, api, script } = await setup()
    const a = [await work.enqueue({ n: 1 }, { scope: 'household-a' }), await work.enqueue({ n: 2 }, { scope: 'household-a' })]
    await Promise.all(a.map((id) => ends.nth(id, 1)))
    script.fail = false
    const b = await work.enqueue({ n: 3 }, { scope: 'household-b' })
    await ends.nth(b, 1)
    await work.enqueue({ n: 4 }, { scope: 'household-b', delayMs: 60_000 })
    await work.enqueue({ n: 5 }, { delayMs: 60_000 })
    expect((await api.get('/api/v1/stats', TOKEN_A)).json).toEqual({ counts: [{ kind: 'work', status: 'failed', count: 2 }] })
    expect((await api.get('/api/v1/stats', TOKEN_B)).json).toEqual({
      counts: [
        { kind: 'work', status: 'scheduled', count: 1 },
        { kind: 'work', status: 'succeeded', count: 1 },
      ],
    })
    expect((await api.get('/api/v1/stats?scope=household-b', TOKEN_A)).json.code).toBe('invalid_argument')
    expect((await api.get('/api/v1/stats')).status).toBe(401)
    expect((await api.call('POST', '/api/v1/stats', { token: TOKEN_A })).headers.get('allow')).toBe('GET, HEAD')
    expect((await api.call('HEAD', '/api/v1/stats', { token: TOKEN_A })).status).toBe(200)
  })
})
