import { Hono } from 'hono'
import { expect, it } from 'vitest'
import { createApi } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'

describeEachBackend('the fetch handler mounted in other hosts', (backend) => {
  const h = harness(backend)

  async function setup() {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const id = await kind.enqueue({ n: 1 })
    return { runner, id }
  }

  it('answers as a Next.js route handler does: a Request in, a Response out, no server', async () => {
    const { runner, id } = await setup()
    const api = createApi({ runner, allowedHosts: ['jobs.example.com'] })
    const GET = (request: Request) => api.fetch(request) // app/api/v1/[...path]/route.ts
    const res = await GET(new Request(`https://jobs.example.com/api/v1/jobs/${id}`))
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ id, kind: 'echo', status: 'queued', result: null, error: null })
    // A Host it was not told of is refused, as a rebound name would be.
    expect((await GET(new Request(`https://evil.example/api/v1/jobs/${id}`))).status).toBe(403)
  })

  it('answers inside a Hono app beside its own routes', async () => {
    const { runner, id } = await setup()
    const api = createApi({ runner, authorize: () => null as never })
    const app = new Hono()
    app.get('/health', (c) => c.text('ok'))
    app.all('/api/v1/*', (c) => api.fetch(c.req.raw))
    expect(await (await app.request('http://localhost/health')).text()).toBe('ok')
    // authorize refusing nothing and returning no scope is a programming error: a 500, never another scope's data.
    expect((await app.request(`http://localhost/api/v1/jobs/${id}`)).status).toBe(500)
    const scoped = createApi({ runner, authorize: () => 'household-1' })
    const other = new Hono()
    other.all('/api/v1/*', (c) => scoped.fetch(c.req.raw))
    // The job was enqueued without a scope: household-1 sees it as missing.
    expect((await other.request(`http://app.example/api/v1/jobs/${id}`)).status).toBe(404)
  })
})
