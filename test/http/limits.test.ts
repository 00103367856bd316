import { connect, type Socket } from 'node:net'
import { afterEach, describe, expect, it } from 'vitest'
import { createApi, listen, type Listening } from 'jobtable/http'
import { sqliteBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'

/** Resolves with everything the server sent once it closes the socket. */
function closed(socket: Socket): Promise<string> {
  let received = ''
  socket.on('data', (chunk: Buffer) => (received += chunk.toString()))
  return new Promise((resolve) => socket.on('close', () => resolve(received)))
}

function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => resolve(socket))
    socket.once('error', reject)
  })
}

describe('sqlite: the standalone server holds against slow, greedy and rebound clients', () => {
  const h = harness(sqliteBackend)
  let server: Listening | undefined
  afterEach(async () => {
    await server?.close(100)
    server = undefined
  })
  const serve = async (options: Parameters<typeof listen>[1]) => {
    const runner = h.runner()
    server = await listen(createApi({ runner }), { port: 0, ...options })
    return server
  }

  it('answers 408 and closes a client that never finishes its headers', async () => {
    const { url } = await serve({ headersTimeoutMs: 300, requestTimeoutMs: 300, timeoutCheckMs: 50 })
    const socket = await open(url)
    const answer = closed(socket)
    socket.write('GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ') // and then nothing
    expect(await answer).toMatch(/^HTTP\/1\.1 408/)
  })

  it('closes connections beyond the cap while those within it are served', async () => {
    const { url } = await serve({ maxConnections: 2 })
    const held = [await open(url), await open(url)]
    const extra = await open(url)
    expect(await closed(extra)).toBe('')
    const answer = closed(held[0]!)
    held[0]!.write('GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n')
    expect(await answer).toMatch(/^HTTP\/1\.1 200/)
    held[1]!.destroy()
  })

  /** A raw request with the Host header a DNS-rebinding page would send. */
  async function statusFor(url: string, host: string): Promise<number> {
    const socket = await open(url)
    const answer = closed(socket)
    socket.write(`GET /api/v1/jobs HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`)
    return Number(/^HTTP\/1\.1 (\d+)/.exec(await answer)?.[1])
  }

  it('refuses a rebound name with 403, answers loopback names, and any name once authorization is on', async () => {
    const port = (u: string) => new URL(u).port
    server = await listen(createApi({ runner: h.runner() }), { port: 0 })
    for (const host of ['evil.example', `evil.example:${port(server.url)}`, '192.168.1.10']) {
      expect(await statusFor(server.url, host), host).toBe(403)
    }
    for (const host of [`127.0.0.1:${port(server.url)}`, `localhost:${port(server.url)}`, '[::1]']) {
      expect(await statusFor(server.url, host), host).toBe(200)
    }
    await server.close(100)
    server = await listen(createApi({ runner: h.runner(), authorize: () => 'household-1' }), { port: 0 })
    expect(await statusFor(server.url, 'jobs.example.com')).toBe(200)
  })
})
