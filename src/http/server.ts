import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { getRequestListener } from '@hono/node-server'
import type { Api } from './api.js'
import { isLoopback } from './hosts.js'
import { optionsObject } from '../options.js'

export { isLoopback }

/** Options of `listen`. Each default is given beside its field. */
export interface ListenOptions {
  /** The address to bind. Default `127.0.0.1`. Any non-loopback address needs `authenticated: true`. */
  readonly host?: string
  /** The port; 0 picks a free one. Default 8080. */
  readonly port?: number
  /** Whether the API checks credentials. Without them, only a loopback address may be bound. Default false. */
  readonly authenticated?: boolean
  /** The most connections held at once; Node closes any beyond it as soon as they are accepted. Default 1024: room for a few hundred slow or idle clients (each socket a file descriptor and a few KiB) beside the rest. */
  readonly maxConnections?: number
  /** The time a client has to send a whole request, in milliseconds. Default 30 000. */
  readonly requestTimeoutMs?: number
  /** The time a client has to send its headers, in milliseconds. Default 10 000. */
  readonly headersTimeoutMs?: number
  /** How long an idle keep-alive connection is kept, in milliseconds. Default 5 000. */
  readonly keepAliveTimeoutMs?: number
  /** How long a socket may see no traffic at all, in milliseconds; event streams send a keep-alive well within it. Default 120 000. */
  readonly idleTimeoutMs?: number
  /**
   * How often the server looks for requests past their header or request
   * timeout, in milliseconds. Default 1 000: Node's own 30 s would let a
   * slow client hold a connection three times the header timeout.
   */
  readonly timeoutCheckMs?: number
}

/** Every field of ListenOptions: any other key is refused. */
const LISTEN_OPTIONS = Object.keys({
  host: 1,
  port: 1,
  authenticated: 1,
  maxConnections: 1,
  requestTimeoutMs: 1,
  headersTimeoutMs: 1,
  keepAliveTimeoutMs: 1,
  idleTimeoutMs: 1,
  timeoutCheckMs: 1,
} satisfies Record<keyof ListenOptions, 1>)

/** A listening server: its URL, and close() that ends event streams and waits for open requests. */
export interface Listening {
  readonly server: Server
  /** The base URL, e.g. `http://127.0.0.1:8080`. */
  readonly url: string
  /**
   * Stops accepting, ends event streams, closes connections as they become
   * idle and resolves once all have closed; connections still busy after
   * `graceMs` (default 10 000) are cut.
   */
  close(graceMs?: number): Promise<void>
}

/** Thrown by `listen` for a non-loopback address without authentication. */
export class UnsafeBindError extends Error {
  readonly code = 'unsafe_bind'
  constructor(host: string) {
    super(`jobtable/http: refusing to listen on ${host} without authentication; configure bearer tokens or bind 127.0.0.1`)
    this.name = 'UnsafeBindError'
  }
}


/**
 * Serves an API on Node's http server with the limits a public server
 * needs, so a slow or greedy client cannot hold it: a whole request must
 * arrive within `requestTimeoutMs`, its headers within `headersTimeoutMs`,
 * idle keep-alive connections close, and at most `maxConnections` are held.
 * Refuses (UnsafeBindError) to bind a non-loopback address unless the API
 * is authenticated, and an unknown option (ConfigError, `invalid_config`).
 */
export async function listen(api: Api, options: ListenOptions = {}): Promise<Listening> {
  const {
    host = '127.0.0.1',
    port = 8080,
    authenticated = false,
    maxConnections = 1_024,
    requestTimeoutMs = 30_000,
    headersTimeoutMs = 10_000,
    keepAliveTimeoutMs = 5_000,
    idleTimeoutMs = 120_000,
    timeoutCheckMs = 1_000,
  } = optionsObject(options, LISTEN_OPTIONS, 'listen')
  if (!authenticated && !isLoopback(host)) throw new UnsafeBindError(host)
  const server = createServer(
    {
      requestTimeout: requestTimeoutMs,
      headersTimeout: headersTimeoutMs,
      keepAliveTimeout: keepAliveTimeoutMs,
      connectionsCheckingInterval: timeoutCheckMs,
    },
    nodeListener(api),
  )
  server.maxConnections = maxConnections
  server.setTimeout(idleTimeoutMs, (socket) => socket.destroy())
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, host, () => {
      server.off('error', reject)
      resolve()
    })
  })
  const address = server.address() as AddressInfo
  const shown = address.family === 'IPv6' ? `[${address.address}]` : address.address
  let closed: Promise<void> | undefined
  return {
    server,
    url: `http://${shown}:${address.port}`,
    close: (graceMs = 10_000) =>
      (closed ??= new Promise<void>((resolve) => {
        // A connection becomes idle only when its response ends (an event
        // stream ends just after api.close()), so look again until all are
        // gone, and cut what is left once the grace period is over.
        const sweep = setInterval(() => server.closeIdleConnections(), 25)
        const cut = setTimeout(() => server.closeAllConnections(), graceMs)
        server.close(() => {
          clearInterval(sweep)
          clearTimeout(cut)
          resolve()
        })
        api.close()
        server.closeIdleConnections()
      })),
  }
}

/**
 * The API as a Node request listener `(req, res)`, for a Node server of
 * your own or a framework that hands over Node's request and response:
 * Express (`app.use('/jobs', nodeListener(api))`: the URL Express took
 * the mount path off is restored from `originalUrl`) and Fastify (in an
 * `onRequest` hook, after `reply.hijack()`, so Fastify reads no body).
 * Mount it before any body parser: the API reads the body itself, with
 * its own size limit.
 */
export function nodeListener(api: Api): (req: IncomingMessage, res: ServerResponse) => void {
  // overrideGlobalObjects: false keeps the process's own Request and Response.
  const listener = getRequestListener((request) => api.fetch(request), { overrideGlobalObjects: false })
  return (req, res) => {
    const original = (req as IncomingMessage & { originalUrl?: unknown }).originalUrl
    if (typeof original === 'string') req.url = original
    void listener(req, res)
  }
}
