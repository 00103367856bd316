import type { Logger } from '../logger.js'
import { optionsObject } from '../options.js'
import { isRefusal, type Authorize } from './auth.js'
import { hostAllowed } from './hosts.js'
import { problem } from './problem.js'

/**
 * What metrics are served from: a prom-client Registry fits
 * (`createMetrics(...).registry` from `jobtable/metrics`). Typed by shape,
 * so `jobtable/http` needs no prom-client.
 */
export interface MetricsSource {
  /** The metrics as Prometheus text. */
  metrics(): Promise<string>
  /** The text's media type, e.g. `text/plain; version=0.0.4; charset=utf-8`. */
  readonly contentType: string
}

/** Options of metricsHandler. Each default is given beside its field; unknown keys are refused (ConfigError). */
export interface MetricsHandlerOptions {
  /** Decides who a request comes from, as the API's hook does. Default: none, and every caller may read the metrics. */
  readonly authorize?: Authorize
  /** With `authorize`: the scopes whose callers may read the metrics (403 for every other). Required with it. */
  readonly scopes?: readonly string[]
  /**
   * The Host header names answered. Default: any when `authorize` is set;
   * otherwise loopback names only, so a web page rebinding its own DNS
   * name to 127.0.0.1 cannot read them through the browser.
   */
  readonly allowedHosts?: 'any' | readonly string[]
  /** Where a failure to read the metrics is logged (its class only). Default: nowhere. */
  readonly logger?: Logger
}

const HANDLER_OPTIONS = Object.keys({ authorize: 1, scopes: 1, allowedHosts: 1, logger: 1 } satisfies Record<keyof MetricsHandlerOptions, 1>)

/**
 * Serves metrics as a standard fetch handler (Request in, Response out),
 * to mount at the path of your choice: GET (and HEAD) answers the
 * Prometheus text; any other method 405. With `authorize`, a caller
 * without credentials gets 401 and one outside `scopes` 403, as in the
 * API. It answers whatever path it is given.
 *
 * ```ts
 * const serve = metricsHandler(metrics.registry, { authorize: bearerTokens(tokens), scopes: ['monitoring'] })
 * app.get('/metrics', (c) => serve(c.req.raw)) // Hono; Node: getRequestListener(serve) from @hono/node-server
 * ```
 */
export function metricsHandler(source: MetricsSource, options?: MetricsHandlerOptions): (request: Request) => Promise<Response> {
  const given = optionsObject(options, HANDLER_OPTIONS, 'metricsHandler')
  const { authorize, scopes = [], logger } = given
  if (source === null || typeof source !== 'object' || typeof source.metrics !== 'function') {
    throw new TypeError('jobtable/http: metricsHandler needs a metrics source (a prom-client Registry)')
  }
  if (authorize !== undefined && typeof authorize !== 'function') throw new TypeError('jobtable/http: authorize must be a function')
  if (!Array.isArray(scopes) || !scopes.every((s) => typeof s === 'string' && s.length > 0 && s.length <= 256)) {
    throw new TypeError('jobtable/http: scopes must be an array of non-empty strings of at most 256 characters')
  }
  if (authorize !== undefined && scopes.length === 0) throw new TypeError('jobtable/http: metricsHandler with authorize needs the scopes that may read the metrics')
  const allowed: ReadonlySet<string> = new Set(scopes)
  const allowedHosts = given.allowedHosts ?? (authorize === undefined ? 'loopback' : 'any')
  return async (request) => {
    try {
      if (!hostAllowed(request.headers.get('host') ?? new URL(request.url).host, allowedHosts)) {
        return problem('forbidden', { detail: 'This server answers only the host names it is configured for.' })
      }
      if (request.method !== 'GET' && request.method !== 'HEAD') return problem('method_not_allowed', {}, { allow: 'GET, HEAD' })
      if (authorize !== undefined) {
        const decision = await authorize(request)
        if (isRefusal(decision)) {
          return decision.refused === 'forbidden' ? problem('forbidden') : problem('unauthenticated', {}, { 'www-authenticate': 'Bearer' })
        }
        if (typeof decision !== 'string' || !allowed.has(decision)) return problem('forbidden')
      }
      return await exposition(source, request.method)
    } catch (err) {
      // The class only: an error's message can quote a query's values or a secret.
      logger?.error({ error: err instanceof Error ? err.name : typeof err }, 'metrics request failed')
      return problem('internal_error')
    }
  }
}

/** The answer to a metrics read: the Prometheus text (none for HEAD, which reads nothing). */
export async function exposition(source: MetricsSource, method: string): Promise<Response> {
  const headers = { 'content-type': source.contentType, 'cache-control': 'no-store' }
  if (method === 'HEAD') return new Response(null, { headers })
  return new Response(await source.metrics(), { headers })
}
