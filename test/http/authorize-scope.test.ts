import { expect, it } from 'vitest'
import { bearerTokens, createApi } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'
import { servers } from './client.js'

/**
 * An `authorize` hook is the application's code: a scope it returns that
 * jobtable cannot use (empty, over 256 characters, or holding a control
 * character, which an enqueue refuses) is a server misconfiguration. It
 * used to surface only at POST /api/v1/jobs, as a bare 500 whose log line
 * said no more than an error class, while reads under the same scope
 * answered 200. Now every route that asks the hook answers 500
 * `internal_error` with a fixed detail naming the cause, stores nothing,
 * and logs the cause by a code, never the scope's value.
 * `bearerTokens` refuses such a scope when it is configured.
 */

const TOKEN = 'token-for-household-a-0001'
const SECRET = 'household-secret-7f3a'
const MISSING = '00000000-0000-4000-8000-000000000000'

describeEachBackend('an authorize hook returning a scope jobtable refuses', (backend) => {
  const h = harness(backend)
  const s = servers()

  for (const [what, scope] of [
    ['a control character', `${SECRET}\u0001`],
    ['a newline', `${SECRET}\n`],
    ['a DEL', `\u007f${SECRET}`],
    ['over 256 characters', SECRET.repeat(20)],
  ] as const) {
    it(`${what}: every route answers 500 internal_error with a detail naming the misconfiguration, nothing is enqueued, and the log names the cause without the scope`, async () => {
      const runner = h.runner()
      runner.register('echo', { payload: echoPayload, handler: () => undefined, enqueueOverHttp: true })
      const logs = captureLogs()
      const api = await s.serve(runner, { authorize: () => scope, logger: logs })
      for (const [method, path, body] of [
        ['POST', '/api/v1/jobs', '{"kind":"echo","payload":{"n":1}}'],
        ['GET', '/api/v1/jobs', undefined],
        ['GET', `/api/v1/jobs/${MISSING}`, undefined],
        ['POST', `/api/v1/jobs/${MISSING}/cancel`, undefined],
        ['GET', '/api/v1/stats', undefined],
      ] as const) {
        const answer = await api.call(method, path, { body })
        expect([answer.status, answer.json.code], `${method} ${path}`).toEqual([500, 'internal_error'])
        expect(answer.json.detail, `${method} ${path}`).toMatch(/authorize hook returned a scope/)
        expect(answer.text).not.toContain(SECRET)
      }
      expect((await runner.list()).jobs).toEqual([])
      const lines = logs.lines.filter((l) => l.level === 'error')
      expect(lines).toHaveLength(5)
      for (const line of lines) {
        expect(line.fields).toMatchObject({ error: 'invalid_scope' })
        expect(line.message).toMatch(/authorize returned a scope/)
      }
      expect(logs.text()).not.toContain(SECRET)
    })
  }

  it('a hook returning neither a scope nor a refusal: 500 internal_error, logged by its cause', async () => {
    const runner = h.runner()
    const logs = captureLogs()
    const api = await s.serve(runner, { authorize: () => 42 as never, logger: logs })
    const answer = await api.get('/api/v1/jobs')
    expect([answer.status, answer.json.code]).toEqual([500, 'internal_error'])
    expect(logs.lines.filter((l) => l.level === 'error').map((l) => l.fields)).toEqual([{ error: 'invalid_scope', reason: 'not_a_scope' }])
  })

  it('bearerTokens and createApi refuse such a scope when they are configured, without quoting it', () => {
    const runner = h.runner()
    for (const scope of [`${SECRET}\u0000`, `${SECRET}\t`, `${SECRET}\u001b[31m`]) {
      expect(() => bearerTokens({ [TOKEN]: scope })).toThrow(/control characters/)
      expect(() => createApi({ runner, authorize: () => 'ops', operatorScope: scope })).toThrow(/control characters/)
      expect(() => createApi({ runner, authorize: () => 'ops', metricsScope: scope })).toThrow(/control characters/)
      try {
        bearerTokens({ [TOKEN]: scope })
      } catch (err) {
        expect(String((err as Error).message)).not.toContain(SECRET)
      }
    }
  })
})
