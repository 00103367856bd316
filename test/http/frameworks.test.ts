import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import express from 'express'
import Fastify from 'fastify'
import { afterEach, expect, it } from 'vitest'
import { createApi, nodeListener, type Api } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { client } from './client.js'

/** A framework app serving its own /health route and the API under `basePath` ('' for the root), on a free loopback port. */
interface Mounted {
  readonly url: string
  close(): Promise<void>
}

const FRAMEWORKS: Record<string, (api: Api, basePath: string) => Promise<Mounted>> = {
  'Express 5': async (api, basePath) => {
    const app = express()
    app.get('/health', (_req, res) => void res.send('ok'))
    // Before any body parser: the API reads its own body, under its own limit.
    app.use(basePath === '' ? '/api/v1' : basePath, nodeListener(api))
    app.use(express.json())
    const server = app.listen(0, '127.0.0.1')
    await once(server, 'listening')
    return {
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      close: () => new Promise<void>((resolve) => {
        api.close()
        server.closeAllConnections()
        server.close(() => resolve())
      }),
    }
  },
  'Fastify 5': async (api, basePath) => {
    const app = Fastify()
    app.get('/health', async () => 'ok')
    const listener = nodeListener(api)
    // onRequest runs before Fastify reads the body; hijack hands the response to the API.
    app.route({
      method: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'],
      url: `${basePath}/api/v1/*`,
      onRequest: (request, reply, done) => {
        reply.hijack()
        listener(request.raw, reply.raw)
        void done
      },
      handler: async () => undefined,
    })
    await app.listen({ port: 0, host: '127.0.0.1' })
    return {
      url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
      close: async () => {
        api.close()
        app.server.closeAllConnections()
        await app.close()
      },
    }
  },
}

describeEachBackend('the API mounted in Express and Fastify', (backend) => {
  const h = harness(backend)
  let open: Mounted[] = []
  afterEach(async () => {
    for (const m of open) await m.close()
    open = []
  })

  for (const [framework, mount] of Object.entries(FRAMEWORKS)) {
    for (const basePath of ['', '/jobs']) {
      it(`${framework}, at ${basePath || 'the root'}: enqueue, read by Location, stream to the end, the document's server, its own routes untouched`, async () => {
        const runner = h.runner()
        runner.register('echo', { payload: echoPayload, result: (n: number) => ({ n }), handler: ({ n }) => n, enqueueOverHttp: true })
        await runner.start()
        const mounted = await mount(createApi({ runner, basePath, bodyLimitBytes: 1024 }), basePath)
        open.push(mounted)
        const api = client(mounted.url + basePath, basePath)

        expect(await (await fetch(`${mounted.url}/health`)).text()).toBe('ok')
        const created = await api.post({ kind: 'echo', payload: { n: 4 } })
        expect(created.status).toBe(201)
        expect(created.headers.get('location')).toBe(`${basePath}/api/v1/jobs/${created.json.id}`)
        const stream = await api.events(created.json.id)
        const events = await stream.rest()
        expect(events.at(-1)?.event).toBe('job')
        expect(JSON.parse(events.at(-1)!.data)).toMatchObject({ status: 'succeeded', result: { n: 4 } })
        const read = await api.call('GET', created.headers.get('location')!.slice(basePath.length))
        expect(read.json).toMatchObject({ id: created.json.id, status: 'succeeded' })
        // The body is the API's to read, under its own limit: a framework's parser never saw it.
        const big = await api.call('POST', '/api/v1/jobs', { body: JSON.stringify({ kind: 'echo', payload: { n: 1, pad: 'x'.repeat(4096) } }) })
        expect([big.status, big.json.code]).toEqual([413, 'payload_too_large'])
        expect((await api.get('/api/v1/no-such-route')).json.code).toBe('route_not_found')
        const doc = await api.get('/api/v1/openapi.json')
        expect(doc.json.servers).toEqual([expect.objectContaining({ url: basePath || '/' })])
      })
    }
  }

  it('refuses a basePath that is not a plain path', async () => {
    const runner = h.runner()
    for (const basePath of ['jobs', '/jobs/', '/../x', '/a/./b', '/a b', '/jobs?x=1', '//jobs', 7]) {
      expect(() => createApi({ runner, basePath: basePath as string }), String(basePath)).toThrow(/basePath must be/)
    }
  })
})
