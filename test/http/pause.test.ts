import { expect, it } from 'vitest'
import { bearerTokens, createApi } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'
import { servers } from './client.js'

const TOKEN_A = 'token-for-household-a-0001'
const TOKEN_OPS = 'token-for-the-operators-0003'

describeEachBackend('HTTP: pausing a kind', (backend) => {
  const h = harness(backend)
  const s = servers()

  async function setup(options: { auth: boolean }) {
    const runner = h.runner({ workers: 2 })
    runner.register('echo', { payload: echoPayload, handler: () => undefined, enqueueOverHttp: true })
    const done = track(runner)
    await runner.start()
    const api = await s.serve(runner, options.auth ? { authorize: bearerTokens({ [TOKEN_A]: 'household-a', [TOKEN_OPS]: 'ops' }), operatorScope: 'ops' } : {})
    return { runner, api, done }
  }

  it('pause keeps a kind queued, lists it, and resume runs its jobs; each answer says whether it changed anything', async () => {
    const { api, runner, done } = await setup({ auth: false })
    expect((await api.call('POST', '/api/v1/kinds/echo/pause')).json).toEqual({ kind: 'echo', paused: true, changed: true })
    expect((await api.call('POST', '/api/v1/kinds/echo/pause')).json).toEqual({ kind: 'echo', paused: true, changed: false })
    const created = await api.post({ kind: 'echo', payload: { n: 1 } })
    runner.wake()
    expect((await api.get(`/api/v1/jobs/${created.json.id}`)).json.status).toBe('queued')
    const listed = await api.get('/api/v1/kinds/paused')
    expect(listed.status).toBe(200)
    expect(listed.json.paused.map((p: { kind: string }) => p.kind)).toEqual(['echo'])
    expect((await api.call('POST', '/api/v1/kinds/echo/resume')).json).toEqual({ kind: 'echo', paused: false, changed: true })
    await done.ends([created.json.id])
    expect((await api.call('POST', '/api/v1/kinds/echo/resume')).json).toEqual({ kind: 'echo', paused: false, changed: false })
    expect((await api.call('GET', '/api/v1/kinds/echo/pause')).status).toBe(405)
  })

  it('with authorization, only the operator scope may pause, resume or list; a household gets 403 and changes nothing', async () => {
    const { api, runner } = await setup({ auth: true })
    for (const [method, path] of [
      ['POST', '/api/v1/kinds/echo/pause'],
      ['POST', '/api/v1/kinds/echo/resume'],
      ['GET', '/api/v1/kinds/paused'],
    ] as const) {
      expect((await api.call(method, path, { token: TOKEN_A })).json.code, path).toBe('forbidden')
      expect((await api.call(method, path)).status, path).toBe(401)
    }
    expect(await runner.paused()).toEqual([])
    expect((await api.call('POST', '/api/v1/kinds/echo/pause', { token: TOKEN_OPS })).json).toEqual({ kind: 'echo', paused: true, changed: true })
    expect((await runner.paused()).map((p) => p.kind)).toEqual(['echo'])
    expect((await api.call('GET', '/api/v1/kinds/paused', { token: TOKEN_OPS })).json.paused).toHaveLength(1)
  })

  it('refuses an operatorScope that is not a non-empty string of at most 256 characters', () => {
    const runner = h.runner()
    for (const operatorScope of ['', 'x'.repeat(257), 7]) expect(() => createApi({ runner, operatorScope: operatorScope as string })).toThrow(/operatorScope/)
  })
})
