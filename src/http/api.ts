import { Hono, type Context } from 'hono'
import {
  DatabaseError,
  InvalidCursorError,
  InvalidPayloadError,
  JOB_STATUSES,
  JobNotFoundError,
  UnknownKindError,
  type JobStatus,
  type Logger,
  type Runner,
} from '../index.js'
import { isCooldownKey } from '../kind.js'
import { isRefusal, SCOPE_RULE, scopeFault, type Authorize } from './auth.js'
import { readJsonBody } from './body.js'
import { ChangeFeed } from './change-feed.js'
import { eventStream } from './events.js'
import { jobBody, parseJobId } from './job-body.js'
import { exposition, type MetricsSource } from './metrics.js'
import { openApiDocumentFor } from './openapi.js'
import { problem } from './problem.js'
import { hostAllowed } from './hosts.js'
import { isPageWithSlash, mountDashboard } from '../dashboard/index.js'
import { optionsObject } from '../options.js'
import { errorParts } from '../error-name.js'

/** Options of createApi. Each default is given beside its field. */
export interface ApiOptions {
  /** The runner whose jobs the API serves. Required. It need not be started: an API-only process enqueues for workers elsewhere. */
  readonly runner: Runner
  /**
   * Decides each request's scope, or refuses it. Default: none, and every
   * caller shares the unscoped space (jobs enqueued without a scope), so
   * mount the API without a hook only where every caller may see every
   * unscoped job.
   */
  readonly authorize?: Authorize
  /** The largest request body accepted, in bytes. Default 1 MiB. */
  readonly bodyLimitBytes?: number
  /**
   * How often event streams look for changes other processes made, in
   * milliseconds (with a change token, as on SQLite, one cheap read for
   * all of them; otherwise each reads its job). Jobs run in this process,
   * and results published on PostgreSQL, are seen at once. Default 250.
   */
  readonly eventsPollMs?: number
  /** How long an event stream may stay silent before a keep-alive comment, in milliseconds. Default 15 000. */
  readonly eventsHeartbeatMs?: number
  /** Where internal errors are logged (their class and code only, never a message). Default: nowhere. */
  readonly logger?: Logger
  /**
   * The Host header names the API answers. Default: any when `authorize`
   * is set; otherwise only loopback names (127.0.0.1, localhost, [::1]),
   * so a web page that rebinds its own DNS name to 127.0.0.1 cannot read
   * an unauthenticated API through the browser. Pass `'any'` when
   * something in front of the API authenticates callers, or the names to
   * allow.
   */
  readonly allowedHosts?: 'any' | readonly string[]
  /**
   * The scope whose callers may pause and resume kinds
   * (`POST /api/v1/kinds/{kind}/pause` and `/resume`), which acts on every
   * scope's jobs, list the paused kinds and the runner's recurring
   * schedules (`GET /api/v1/kinds/paused`, `GET /api/v1/schedules`), read
   * the rate limits, cooldowns and the last hour's activity across every
   * scope (`GET /api/v1/rate-limits`, `/cooldowns`, `/activity`) and clear
   * a cooldown (`DELETE /api/v1/cooldowns/{key}`). Default: none when
   * `authorize` is set, so no caller may; without `authorize`, every
   * caller may (the API then answers loopback names only, unless
   * allowedHosts says otherwise).
   */
  readonly operatorScope?: string
  /**
   * The path the API is mounted under, e.g. `/jobs` for routes at
   * `/jobs/api/v1/...`: the request URL keeps it (mount the handler where
   * the full path reaches it), and Location headers and the OpenAPI
   * document's server carry it. Default none: routes at `/api/v1/...`.
   */
  readonly basePath?: string
  /**
   * Metrics to serve at `GET /metrics` (after `basePath`; Prometheus text): a prom-client
   * Registry, such as `createMetrics({ runner }).registry` from
   * `jobtable/metrics`. Read by the callers of `operatorScope` or
   * `metricsScope` once the API has authorization (403 for every other
   * scope), by every caller without it. Default: none (`/metrics` answers
   * 404).
   */
  readonly metrics?: MetricsSource
  /**
   * A scope whose callers may read `/metrics` and do nothing else an
   * operator may: the scope of a monitoring system's token. Default: none
   * (the operator scope alone).
   */
  readonly metricsScope?: string
  /**
   * Whether to serve the dashboard, a web page for people, at the base
   * path itself (`/`, or `/jobs` for basePath `/jobs`, where `/jobs/`
   * redirects), with its scripts and style under `<basePath>/dashboard/`.
   * The page and its assets hold no data and need no credentials; the
   * page reads and acts through this API with the caller's (it asks for a
   * bearer token when the API answers 401), so it shows and does only
   * what the caller may. Default false: a library user's application
   * keeps its own `/`. `jobtable serve` turns it on.
   */
  readonly dashboard?: boolean
}

/** A mounted API: a standard fetch handler, and close() to end its open event streams. */
export interface Api {
  /** Answers one request. Never rejects: every failure is a problem response. */
  fetch(request: Request): Promise<Response>
  /** Ends every open event stream, so a server closing down is not held open by them. */
  close(): void
}

/** Every route and the methods it allows, for 405 answers. */
const ALLOW = {
  jobs: 'GET, HEAD, POST',
  job: 'GET, HEAD',
  events: 'GET, HEAD',
  cancel: 'POST',
  retry: 'POST',
  stats: 'GET, HEAD',
  pause: 'POST',
  paused: 'GET, HEAD',
  schedules: 'GET, HEAD',
  rateLimits: 'GET, HEAD',
  cooldowns: 'GET, HEAD',
  cooldown: 'DELETE',
  activity: 'GET, HEAD',
  metrics: 'GET, HEAD',
  openapi: 'GET, HEAD',
} as const

const MIB = 1024 * 1024
/** Every field of ApiOptions: any other key is refused, so a misspelled option is never silently ignored. */
const API_OPTIONS = Object.keys({
  runner: 1,
  authorize: 1,
  bodyLimitBytes: 1,
  eventsPollMs: 1,
  eventsHeartbeatMs: 1,
  logger: 1,
  allowedHosts: 1,
  operatorScope: 1,
  basePath: 1,
  metrics: 1,
  metricsScope: 1,
  dashboard: 1,
} satisfies Record<keyof ApiOptions, 1>)
const LIST_PARAMS: ReadonlySet<string> = new Set(['status', 'kind', 'limit', 'cursor'])

/**
 * Makes the HTTP API of a runner as a standard fetch handler (Request in,
 * Response out), which Node's http server (through @hono/node-server),
 * Hono, Next.js route handlers, and Express or Fastify through a fetch
 * adapter (`nodeListener`) can mount. Routes are absolute
 * (`/api/v1/...`, after `basePath`): mount it where the request URL keeps
 * its full path. An unknown option is refused (ConfigError,
 * `invalid_config`).
 */
export function createApi(options: ApiOptions): Api {
  const given = optionsObject(options, API_OPTIONS, 'createApi')
  const { runner, authorize, bodyLimitBytes = MIB, eventsPollMs = 250, eventsHeartbeatMs = 15_000, logger, operatorScope, basePath = '', metrics, metricsScope, dashboard = false } = given
  // A plain path: it is put in Location headers and the document as it is.
  if (typeof basePath !== 'string' || (basePath !== '' && !/^(\/[A-Za-z0-9._~-]+)+$/.test(basePath)) || /\/\.\.?(\/|$)/.test(basePath)) {
    throw new TypeError('jobtable/http: basePath must be empty or a path such as /jobs: segments of letters, digits and . _ ~ -, no trailing slash')
  }
  for (const [name, scope] of Object.entries({ operatorScope, metricsScope })) {
    if (scope !== undefined && scopeFault(scope) !== undefined) throw new TypeError(`jobtable/http: ${name} must be ${SCOPE_RULE}`)
  }
  if (metrics !== undefined && (metrics === null || typeof metrics !== 'object' || typeof metrics.metrics !== 'function')) {
    throw new TypeError('jobtable/http: metrics must be a metrics source (a prom-client Registry)')
  }
  if (typeof dashboard !== 'boolean') throw new TypeError('jobtable/http: dashboard must be true or false')
  const allowedHosts = given.allowedHosts ?? (authorize === undefined ? 'loopback' : 'any')
  if (runner === null || typeof runner !== 'object' || typeof runner.get !== 'function') {
    throw new TypeError('jobtable/http: createApi needs { runner }')
  }
  if (authorize !== undefined && typeof authorize !== 'function') throw new TypeError('jobtable/http: authorize must be a function')
  for (const [name, value] of Object.entries({ bodyLimitBytes, eventsPollMs, eventsHeartbeatMs })) {
    if (!Number.isInteger(value) || value < 1) throw new TypeError(`jobtable/http: ${name} must be a positive integer`)
  }
  const feed = new ChangeFeed(runner, eventsPollMs)
  const streams = new Set<() => void>()
  const track = (end: () => void) => {
    streams.add(end)
    return () => void streams.delete(end)
  }

  /** The caller's scope (null without a hook), or the refusal to answer with. */
  const scopeOf = async (request: Request): Promise<string | null | Response> => {
    if (authorize === undefined) return null
    const decision = await authorize(request)
    if (isRefusal(decision)) {
      return decision.refused === 'forbidden' ? problem('forbidden') : problem('unauthenticated', {}, { 'www-authenticate': 'Bearer' })
    }
    // The hook is the application's code: a scope jobtable cannot store is its misconfiguration, refused on every
    // route alike (not only where an enqueue would refuse it), and logged by its reason, never its value.
    const fault = scopeFault(decision)
    if (fault !== undefined) {
      logger?.error(
        { error: 'invalid_scope', reason: fault },
        fault === 'not_a_scope'
          ? 'authorize returned neither a scope nor a refusal; answering 500'
          : `authorize returned a scope jobtable refuses (${fault === 'length' ? 'empty or over 256 characters' : 'it holds control characters'}); answering 500`,
      )
      return problem('internal_error', { detail: `The authorize hook returned a scope this API cannot use (it must be ${SCOPE_RULE}): a server misconfiguration.` })
    }
    return decision as string
  }

  /** Reads the job a route names, within the caller's scope, or the problem to answer with. */
  const jobOf = async (c: Context): Promise<{ scope: string | null; job: Awaited<ReturnType<Runner['get']>> } | Response> => {
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    const id = parseJobId(c.req.param('id') ?? '')
    if (id === undefined) return problem('invalid_id')
    return { scope, job: await runner.get(id, { scope }) }
  }

  const app = basePath === '' ? new Hono() : new Hono().basePath(basePath)

  app.use('*', async (c, next) => {
    // A Request built in-process (a route handler, a test) may carry no Host header: its URL names the host then.
    if (!hostAllowed(c.req.header('host') ?? new URL(c.req.url).host, allowedHosts)) {
      return problem('forbidden', { detail: 'This API answers only the host names it is configured for.' })
    }
    return next()
  })

  // Made at the first request, once the application has registered its kinds; again if it registers more.
  let document: { kinds: number; text: string } | undefined
  const openApiText = (): string => {
    const kinds = runner.kinds().filter((k) => k.enqueueOverHttp)
    if (document?.kinds !== kinds.length) {
      document = { kinds: kinds.length, text: JSON.stringify(openApiDocumentFor(kinds.map((k) => ({ name: k.name, payload: k.payload })), { basePath })) }
    }
    return document.text
  }
  app.get('/api/v1/openapi.json', () => new Response(openApiText(), { headers: { 'content-type': 'application/json' } }))
  app.all('/api/v1/openapi.json', () => notAllowed(ALLOW.openapi))

  app.get('/api/v1/jobs', async (c) => {
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    const query = listQuery(new URL(c.req.url).searchParams)
    if (query instanceof Response) return query
    const page = await runner.list({ ...query, scope })
    return json(200, { jobs: page.jobs.map(jobBody), nextCursor: page.nextCursor })
  })

  app.post('/api/v1/jobs', async (c) => {
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    const body = await readJsonBody(c.req.raw, bodyLimitBytes)
    if (!body.ok) return body.response
    const request = enqueueRequest(body.value)
    if (request instanceof Response) return request
    // A kind not exposed over HTTP answers exactly as one not registered.
    if (runner.kind(request.kind)?.enqueueOverHttp !== true) return problem('unknown_kind')
    const options = { ...(scope === null ? {} : { scope }), ...(request.uniqueKey === undefined ? {} : { uniqueKey: request.uniqueKey }) }
    const { id, created } = await runner.enqueueUnique(request.kind, request.payload, options)
    const job = await runner.get(id, { scope })
    // 200 with the job that holds the key: a second press of the same button stores nothing.
    return json(created ? 201 : 200, jobBody(job), { location: `${basePath}/api/v1/jobs/${id}` })
  })
  app.all('/api/v1/jobs', () => notAllowed(ALLOW.jobs))

  app.get('/api/v1/jobs/:id', async (c) => {
    const found = await jobOf(c)
    if (found instanceof Response) return found
    return json(200, jobBody(found.job))
  })
  app.all('/api/v1/jobs/:id', () => notAllowed(ALLOW.job))

  app.get('/api/v1/jobs/:id/events', async (c) => {
    const found = await jobOf(c)
    if (found instanceof Response) return found
    // Hono answers HEAD through the GET route and drops the body unread: start no stream for it.
    if (c.req.raw.method === 'HEAD') return new Response(null, { headers: { 'content-type': 'text/event-stream; charset=utf-8' } })
    const { job, scope } = found
    return eventStream({ runner, id: job.id, scope, first: job, feed, heartbeatMs: eventsHeartbeatMs, signal: c.req.raw.signal, track })
  })
  app.all('/api/v1/jobs/:id/events', () => notAllowed(ALLOW.events))

  app.post('/api/v1/jobs/:id/cancel', async (c) => {
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    const id = parseJobId(c.req.param('id') ?? '')
    if (id === undefined) return problem('invalid_id')
    // Another scope's job answers as missing (runner.cancel rejects with JobNotFoundError, mapped to 404).
    const result = await runner.cancel(id, { scope })
    if (result === 'terminal') return problem('job_finished')
    const job = await runner.get(id, { scope })
    // 200: cancelled now; 202: running, its runner aborts it and it ends cancelled.
    return json(result === 'cancelled' ? 200 : 202, jobBody(job))
  })
  app.all('/api/v1/jobs/:id/cancel', () => notAllowed(ALLOW.cancel))

  app.post('/api/v1/jobs/:id/retry', async (c) => {
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    const id = parseJobId(c.req.param('id') ?? '')
    if (id === undefined) return problem('invalid_id')
    // Another scope's job answers as missing (runner.retry rejects with JobNotFoundError, mapped to 404).
    const result = await runner.retry(id, { scope })
    if (result !== 'queued') return problem(result === 'unique_key_held' ? 'unique_key_held' : 'job_not_retryable')
    return json(200, jobBody(await runner.get(id, { scope })))
  })
  app.all('/api/v1/jobs/:id/retry', () => notAllowed(ALLOW.retry))

  app.get('/api/v1/stats', async (c) => {
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    if (new URL(c.req.url).search !== '') return problem('invalid_argument', { detail: 'this route takes no parameters' })
    return json(200, { counts: await runner.counts({ scope }) })
  })
  app.all('/api/v1/stats', () => notAllowed(ALLOW.stats))

  /** The caller, if it may do what operators do (see operatorScope), or the refusal to answer with. */
  const operator = async (request: Request): Promise<Response | undefined> => {
    const scope = await scopeOf(request)
    if (scope instanceof Response) return scope
    if (scope === null || scope === operatorScope) return undefined
    return problem('forbidden')
  }

  app.get('/api/v1/kinds/paused', async (c) => {
    const refused = await operator(c.req.raw)
    if (refused !== undefined) return refused
    return json(200, { paused: await runner.paused() })
  })
  app.all('/api/v1/kinds/paused', () => notAllowed(ALLOW.paused))

  // The schedules this runner declared (never their payloads): operators only, as pausing is, since they span every scope.
  app.get('/api/v1/schedules', async (c) => {
    const refused = await operator(c.req.raw)
    if (refused !== undefined) return refused
    if (new URL(c.req.url).search !== '') return problem('invalid_argument', { detail: 'this route takes no parameters' })
    return json(200, { schedules: await runner.schedules() })
  })
  app.all('/api/v1/schedules', () => notAllowed(ALLOW.schedules))

  for (const action of ['pause', 'resume'] as const) {
    app.post(`/api/v1/kinds/:kind/${action}`, async (c) => {
      const refused = await operator(c.req.raw)
      if (refused !== undefined) return refused
      const kind = c.req.param('kind') ?? ''
      if (kind.length === 0 || kind.length > 256) return problem('invalid_request', { issues: [{ path: 'kind' }] })
      const changed = action === 'pause' ? await runner.pause(kind) : await runner.resume(kind)
      return json(200, { kind, paused: action === 'pause', changed })
    })
    app.all(`/api/v1/kinds/:kind/${action}`, () => notAllowed(ALLOW.pause))
  }

  // Rate limits, cooldowns and activity span every scope: operators only, as pausing is.
  app.get('/api/v1/rate-limits', async (c) => {
    const refused = await operator(c.req.raw)
    if (refused !== undefined) return refused
    if (new URL(c.req.url).search !== '') return problem('invalid_argument', { detail: 'this route takes no parameters' })
    return json(200, { rateLimits: await runner.rateLimits() })
  })
  app.all('/api/v1/rate-limits', () => notAllowed(ALLOW.rateLimits))

  app.get('/api/v1/cooldowns', async (c) => {
    const refused = await operator(c.req.raw)
    if (refused !== undefined) return refused
    if (new URL(c.req.url).search !== '') return problem('invalid_argument', { detail: 'this route takes no parameters' })
    return json(200, { cooldowns: await runner.cooldowns() })
  })
  app.all('/api/v1/cooldowns', () => notAllowed(ALLOW.cooldowns))

  app.delete('/api/v1/cooldowns/:key', async (c) => {
    const refused = await operator(c.req.raw)
    if (refused !== undefined) return refused
    const key = cooldownKey(new URL(c.req.url).pathname)
    if (key === undefined) return problem('invalid_key')
    if (!(await runner.clearCooldown(key))) return problem('cooldown_not_found')
    return new Response(null, { status: 204, headers: { 'cache-control': 'no-store' } })
  })
  app.all('/api/v1/cooldowns/:key', () => notAllowed(ALLOW.cooldown))

  app.get('/api/v1/activity', async (c) => {
    const refused = await operator(c.req.raw)
    if (refused !== undefined) return refused
    const minutes = activityMinutes(new URL(c.req.url).searchParams)
    if (minutes instanceof Response) return minutes
    return json(200, await runner.activity({ minutes }))
  })
  app.all('/api/v1/activity', () => notAllowed(ALLOW.activity))

  // Not under /api/v1: where Prometheus looks by default. Without metrics it answers as any unknown route.
  app.get('/metrics', async (c) => {
    if (metrics === undefined) return problem('route_not_found')
    const scope = await scopeOf(c.req.raw)
    if (scope instanceof Response) return scope
    if (scope !== null && scope !== operatorScope && scope !== metricsScope) return problem('forbidden')
    return exposition(metrics, c.req.raw.method)
  })
  app.all('/metrics', () => (metrics === undefined ? problem('route_not_found') : notAllowed(ALLOW.metrics)))

  if (dashboard) mountDashboard(app, basePath)

  app.notFound((c) => {
    // The page under a base path is at the base path itself: `/jobs/` is sent there.
    if (dashboard && (c.req.method === 'GET' || c.req.method === 'HEAD') && isPageWithSlash(new URL(c.req.url).pathname, basePath)) {
      return new Response(null, { status: 302, headers: { location: basePath, 'cache-control': 'no-store' } })
    }
    return problem('route_not_found')
  })
  app.onError((err) => {
    const known = toProblem(err)
    if (known) return known
    logger?.error(loggable(err), 'request failed')
    return problem('internal_error')
  })

  return {
    fetch: async (request) => {
      try {
        return await app.fetch(request)
      } catch (err) {
        logger?.error(loggable(err), 'request failed')
        return problem('internal_error')
      }
    },
    close: () => {
      for (const end of [...streams]) end()
    },
  }
}

/** What an unexpected error is logged as: see errorParts (never a message, nor a name or code anyone could have set). */
function loggable(err: unknown): { error: string; code?: string } {
  const { name, code } = errorParts(err)
  return code === undefined ? { error: name } : { error: name, code }
}

/** The problem a known runner error answers with, or undefined for any other error. */
function toProblem(err: unknown): Response | undefined {
  if (err instanceof JobNotFoundError) return problem('not_found')
  if (err instanceof UnknownKindError) return problem('unknown_kind')
  if (err instanceof InvalidCursorError) return problem('invalid_cursor')
  if (err instanceof InvalidPayloadError) {
    // Paths only: a validator's message may quote the value it refused.
    const paths = [...new Set(err.issues.map((i) => i.path))].slice(0, 50)
    return problem('invalid_payload', { issues: paths.map((path) => ({ path })) })
  }
  if (err instanceof DatabaseError && err.transient) return problem('unavailable', {}, { 'retry-after': '1' })
  return undefined
}

/** The list filters of a query string, or the problem refusing it. Unknown or repeated parameters are refused, so a typo is not silently ignored. */
function listQuery(params: URLSearchParams): { status?: JobStatus; kind?: string; limit?: number; cursor?: string } | Response {
  const seen = new Set<string>()
  for (const key of params.keys()) {
    if (!LIST_PARAMS.has(key)) return problem('invalid_argument', { detail: 'the parameters are status, kind, limit and cursor' })
    if (seen.has(key)) return problem('invalid_argument', { detail: 'a parameter is repeated' })
    seen.add(key)
  }
  const query: { status?: JobStatus; kind?: string; limit?: number; cursor?: string } = {}
  const status = params.get('status')
  if (status !== null) {
    if (!(JOB_STATUSES as readonly string[]).includes(status)) {
      return problem('invalid_argument', { detail: 'status must be one of ' + JOB_STATUSES.join(', ') })
    }
    query.status = status as JobStatus
  }
  const kind = params.get('kind')
  if (kind !== null) {
    if (kind.length === 0 || kind.length > 256) return problem('invalid_argument', { detail: 'kind must be 1 to 256 characters' })
    query.kind = kind
  }
  const limit = params.get('limit')
  if (limit !== null) {
    const n = /^\d{1,4}$/.test(limit) ? Number(limit) : NaN
    if (!(n >= 1 && n <= 1000)) return problem('invalid_argument', { detail: 'limit must be an integer from 1 to 1000' })
    query.limit = n
  }
  const cursor = params.get('cursor')
  if (cursor !== null) query.cursor = cursor
  return query
}

/**
 * The cooldown key a path ends with, percent-decoded here rather than by
 * the router (which passes a malformed escape through as it is): a key
 * job.rateLimited takes (isCooldownKey), or undefined.
 */
function cooldownKey(pathname: string): string | undefined {
  let key: string
  try {
    key = decodeURIComponent(pathname.slice(pathname.lastIndexOf('/') + 1))
  } catch {
    return undefined
  }
  return isCooldownKey(key) ? key : undefined
}

/** The `minutes` of an activity query (1 to 1440, default 60), or the problem refusing the query. */
function activityMinutes(params: URLSearchParams): number | Response {
  const keys = [...params.keys()]
  if (keys.some((key) => key !== 'minutes')) return problem('invalid_argument', { detail: 'the only parameter is minutes' })
  if (keys.length > 1) return problem('invalid_argument', { detail: 'a parameter is repeated' })
  const minutes = params.get('minutes')
  if (minutes === null) return 60
  const n = /^\d{1,4}$/.test(minutes) ? Number(minutes) : NaN
  if (!(n >= 1 && n <= 1440)) return problem('invalid_argument', { detail: 'minutes must be an integer from 1 to 1440' })
  return n
}

/** The {kind, payload} of an enqueue body, or the problem naming which field is wrong. */
function enqueueRequest(body: unknown): { kind: string; payload: unknown; uniqueKey: string | undefined } | Response {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return problem('invalid_request', { issues: [{ path: '' }] })
  const record = body as Record<string, unknown>
  const issues: { path: string }[] = []
  const kind = record.kind
  if (typeof kind !== 'string' || kind.length === 0 || kind.length > 256) issues.push({ path: 'kind' })
  if (!('payload' in record)) issues.push({ path: 'payload' })
  const uniqueKey = record.uniqueKey
  if (uniqueKey !== undefined && (typeof uniqueKey !== 'string' || uniqueKey.length === 0 || uniqueKey.length > 256 || uniqueKey.includes('\u0000'))) {
    issues.push({ path: 'uniqueKey' })
  }
  for (const key of Object.keys(record).slice(0, 50)) if (key !== 'kind' && key !== 'payload' && key !== 'uniqueKey') issues.push({ path: key })
  if (issues.length > 0) return problem('invalid_request', { issues })
  return { kind: kind as string, payload: record.payload, uniqueKey: uniqueKey as string | undefined }
}

function notAllowed(allow: string): Response {
  return problem('method_not_allowed', {}, { allow })
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers } })
}

