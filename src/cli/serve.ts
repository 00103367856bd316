import { createApi, bearerTokens, isLoopback, listen, type Api, type ApiOptions, type Listening } from '../http/index.js'
import { DatabaseError, type Runner } from '../index.js'
import { errorParts } from '../error-name.js'
import { describeDatabase } from './database.js'
import { databaseErrorWords } from './database-errors.js'
import { loadKinds, registerFailure, type KindsModule } from './kinds.js'
import { listenMetrics, metricsPlan, openMetrics, type CliMetrics } from './metrics.js'
import { COMMON_FLAGS, databaseOf, loggerFor, openRunner, type CliContext } from './runtime.js'
import { firstSignal } from './signals.js'
import { readTokens } from './tokens.js'
import { durationFlag, EXIT, HELP, intFlag, parse, UsageError } from './usage.js'

/**
 * `jobtable serve` and `jobtable worker`: the API and workers together, or
 * workers only. Resolves to the exit code once stopped: 0 after a signal
 * (even when --stop-timeout left handlers running: their jobs fail as
 * interrupted at the next start), 1 when the workers stopped on a
 * database error.
 */
export async function serve(ctx: CliContext, mode: 'serve' | 'worker'): Promise<number> {
  const { values } = parse(ctx.args, {
    ...COMMON_FLAGS,
    kinds: { type: 'string', short: 'k' },
    workers: { type: 'string', short: 'w' },
    'stop-timeout': { type: 'string' },
    retention: { type: 'string' },
    'tokens-file': { type: 'string' },
    'metrics-port': { type: 'string' },
    'metrics-host': { type: 'string' },
    'metrics-scope': { type: 'string' },
    ...(mode === 'serve'
      ? {
          host: { type: 'string' },
          port: { type: 'string', short: 'p' },
          'operator-scope': { type: 'string' },
          'max-connections': { type: 'string' },
          metrics: { type: 'boolean' },
          demo: { type: 'boolean' },
        }
      : {}),
  })
  if (values.help) {
    ctx.stdout.write(HELP[mode])
    return EXIT.ok
  }
  const v = values as Record<string, string | boolean | undefined>
  const str = (name: string) => (typeof v[name] === 'string' ? (v[name] as string) : undefined)
  const workers = intFlag('workers', str('workers'), 4, mode === 'serve' ? 0 : 1, 1000)
  const host = str('host') ?? '127.0.0.1'
  const port = intFlag('port', str('port'), 8080, 0, 65535)
  const maxConnections = intFlag('max-connections', str('max-connections'), 1_024, 1, 100_000)
  const stopTimeoutMs = intFlag('stop-timeout', str('stop-timeout'), 20_000, 0, 3_600_000)
  const retentionFlag = str('retention')
  const retention = retentionFlag === undefined ? undefined : retentionFlag === 'off' ? false : { maxAgeMs: durationFlag('retention', retentionFlag) }
  const kindsPath = str('kinds')
  if (kindsPath === undefined && workers > 0) {
    throw new UsageError('--kinds is required: a worker without handlers has no kinds to claim')
  }
  if (v.demo === true && kindsPath === undefined) throw new UsageError('--demo needs --kinds')
  const database = databaseOf(str('database'), ctx.env)
  const logger = loggerFor(str('log-level'))
  // A worker's tokens guard only its metrics listener.
  const ownListener = str('metrics-port') !== undefined
  if (mode === 'worker' && str('tokens-file') !== undefined && !ownListener) throw new UsageError('a worker reads --tokens-file only to guard --metrics-port')
  const tokens = mode === 'serve' || ownListener ? readTokens(str('tokens-file'), ctx.env.JOBTABLE_TOKENS, (m) => logger.warn(m)) : undefined
  if (mode === 'serve' && tokens === undefined && !isLoopback(host)) {
    throw new UsageError(`refusing to listen on ${host} without authentication: give --tokens-file (or JOBTABLE_TOKENS), or bind 127.0.0.1`)
  }
  const authorize = tokens === undefined ? undefined : bearerTokens(tokens)
  const operatorScope = str('operator-scope')
  if (operatorScope !== undefined && (tokens === undefined || operatorScope.length === 0 || operatorScope.length > 256)) {
    throw new UsageError('--operator-scope names the scope of a token in --tokens-file (1 to 256 characters), whose holders may pause and resume kinds')
  }
  const plan = metricsPlan(
    { metrics: v.metrics === true, port: str('metrics-port'), host: str('metrics-host'), scope: str('metrics-scope') },
    tokens !== undefined,
    operatorScope,
    isLoopback,
  )
  const metricsScopes = [operatorScope, plan.scope].filter((s): s is string => s !== undefined)

  const kinds: KindsModule | undefined = kindsPath === undefined ? undefined : await loadKinds(kindsPath)
  if (v.demo === true && typeof kinds?.demo !== 'function') throw new UsageError(`--demo needs ${kindsPath} to export demo(runner, { url, signal })`)
  const signals = firstSignal((signal) => logger.warn({ signal }, 'second signal: exiting at once'))
  // Nothing here keeps the process alive: a started runner does so itself
  // until it stops, and without workers the HTTP server does.
  // serve and worker may create the database: they are how an application
  // runs for the first time (a new machine, npm start) and set it up as
  // migrate would, which a process that runs jobs needs anyway.
  const runner = await openRunner(database, 'create', workers, logger, retention === undefined ? {} : { retention })
  let listening: Listening | undefined
  let metricsListening: Listening | undefined
  let metrics: CliMetrics | undefined
  let api: Api | undefined
  const demoStop = new AbortController()
  try {
    if (kinds !== undefined) {
      try {
        await kinds.registerKinds(runner)
      } catch (err) {
        throw registerFailure(kindsPath!, err)
      }
    }
    if (plan.on) metrics = await openMetrics(runner)
    if (workers > 0) await runner.start()
    if (metrics !== undefined && plan.port !== undefined) {
      metricsListening = await listenMetrics(metrics.registry, { ...plan, port: plan.port }, authorize, metricsScopes)
      logger.info({ url: `${metricsListening.url}/metrics`, auth: authorize ? 'bearer' : 'none' }, 'jobtable serving metrics')
      ctx.stdout.write(`jobtable metrics at ${metricsListening.url}/metrics\n`)
    }
    if (mode === 'serve') {
      const onApi: Pick<ApiOptions, 'metrics' | 'metricsScope'> = metrics !== undefined && plan.port === undefined ? { metrics: metrics.registry, ...(plan.scope === undefined ? {} : { metricsScope: plan.scope }) } : {}
      const inner = createApi({ runner, authorize, logger, dashboard: true, ...(operatorScope === undefined ? {} : { operatorScope }), ...onApi })
      api = { ...inner, fetch: accessLogged(inner, logger) }
      listening = await listen(api, { host, port, authenticated: authorize !== undefined, maxConnections })
      logger.info({ url: listening.url, database: describeDatabase(database), workers, auth: authorize ? 'bearer' : 'none' }, `jobtable serving ${listening.url}/api/v1/jobs`)
      ctx.stdout.write(`jobtable API at ${listening.url}/api/v1/jobs (OpenAPI: ${listening.url}/api/v1/openapi.json)\n`)
      if (onApi.metrics !== undefined) ctx.stdout.write(`jobtable metrics at ${listening.url}/metrics\n`)
      ctx.stdout.write(`jobtable dashboard at ${listening.url}/\n`)
    }
    // A worker's startup line (its kinds and workers) is the runner's own, at info: none here.
    if (v.demo === true && listening) void runDemo(kinds!, runner, listening.url, demoStop.signal, logger)
    const outcome = await Promise.race([
      signals.stopped.then((signal) => ({ signal })),
      workers > 0 ? runner.wait().then(() => ({ failed: undefined }), (err: unknown) => ({ failed: err })) : new Promise<never>(() => {}),
    ])
    demoStop.abort()
    if ('signal' in outcome) {
      logger.info({ signal: outcome.signal, stop_timeout_ms: stopTimeoutMs }, 'stopping: waiting for running jobs up to the stop timeout (a signal more than 1 s after this one exits at once)')
    } else {
      // The database's own code (SQLITE_ERROR, a SQLSTATE), never its message, which can quote values.
      const dbCode = outcome.failed instanceof DatabaseError ? { db_code: outcome.failed.dbCode, reason: databaseErrorWords(outcome.failed.dbCode, database) } : {}
      logger.error({ error: errorName(outcome.failed), ...dbCode }, 'workers stopped on a database error')
    }
    // Claiming stops now, however long the listeners take to close: no job
    // starts after the signal. By the deadline, handlers still running are
    // left, their jobs running for the next start to fail as interrupted
    // (the runner logs how many), and requests still open are cut.
    const stopped = runner.stop({ timeoutMs: stopTimeoutMs })
    await listening?.close(stopTimeoutMs)
    await metricsListening?.close(stopTimeoutMs)
    await stopped
    await runner.close()
    metrics?.close()
    logger.info('stopped')
    return 'signal' in outcome ? EXIT.ok : EXIT.failure
  } catch (err) {
    demoStop.abort()
    await listening?.close().catch(() => undefined)
    await metricsListening?.close().catch(() => undefined)
    metrics?.close()
    await runner.close().catch(() => undefined)
    throw err
  } finally {
    signals.dispose()
  }
}

/** Wraps the API's fetch with one log line per request: method, path, status, milliseconds; never headers, query or body. */
function accessLogged(api: Api, logger: ReturnType<typeof loggerFor>): Api['fetch'] {
  return async (request) => {
    const started = performance.now()
    const response = await api.fetch(request)
    const path = new URL(request.url).pathname
    logger.info({ method: request.method, path, status: response.status, ms: Math.round(performance.now() - started) }, 'request')
    return response
  }
}

async function runDemo(kinds: KindsModule, runner: Runner, url: string, signal: AbortSignal, logger: ReturnType<typeof loggerFor>): Promise<void> {
  try {
    await kinds.demo!(runner, { url, signal })
  } catch (err) {
    // An enqueue racing the runner's close as the server stops is no failure of the demo.
    if (signal.aborted) return
    logger.error({ error: errorName(err) }, 'demo failed')
  }
}

function errorName(err: unknown): string {
  const { name, code } = errorParts(err)
  return code === undefined ? name : `${name} (${code})`
}
