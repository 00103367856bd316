import { listen, metricsHandler, type Authorize, type Listening, type MetricsSource } from '../http/index.js'
import { problem } from '../http/problem.js'
import type { Runner } from '../index.js'
import { isMissingPackage } from './database.js'
import { CliFailure, intFlag, UsageError } from './usage.js'

/** Where `serve` and `worker` serve metrics, from their flags: nowhere, on the API's listener, or on a listener of their own. */
export interface MetricsPlan {
  /** Whether metrics are served at all. */
  readonly on: boolean
  /** The port of their own listener, or undefined for the API's (serve) or none. */
  readonly port: number | undefined
  readonly host: string
  /** The scope of the tokens that may read them, besides the operator scope. */
  readonly scope: string | undefined
}

/**
 * Reads the metrics flags: `--metrics` (serve: GET /metrics on the API's
 * listener), `--metrics-port` and `--metrics-host` (a listener of their
 * own, 127.0.0.1 unless told), `--metrics-scope`. With tokens, the scopes
 * that may read them must be named; without, only a loopback address may
 * be bound. Mistakes are usage errors.
 */
export function metricsPlan(
  flags: { metrics?: boolean; port?: string; host?: string; scope?: string },
  tokens: boolean,
  operatorScope: string | undefined,
  isLoopback: (host: string) => boolean,
): MetricsPlan {
  const port = flags.port === undefined ? undefined : intFlag('metrics-port', flags.port, 0, 0, 65535)
  const on = flags.metrics === true || port !== undefined
  const host = flags.host ?? '127.0.0.1'
  if (flags.host !== undefined && port === undefined) throw new UsageError('--metrics-host needs --metrics-port')
  if (flags.scope !== undefined && (!on || !tokens || flags.scope.length === 0 || flags.scope.length > 256)) {
    throw new UsageError('--metrics-scope names the scope of a token in --tokens-file (1 to 256 characters) that may read the metrics; it needs --metrics or --metrics-port')
  }
  if (on && tokens && flags.scope === undefined && operatorScope === undefined) {
    throw new UsageError('metrics with --tokens-file need --metrics-scope (or --operator-scope): the scope of the tokens that may read them')
  }
  if (port !== undefined && !tokens && !isLoopback(host)) {
    throw new UsageError(`refusing to serve metrics on ${host} without authentication: give --tokens-file (or JOBTABLE_TOKENS), or bind 127.0.0.1`)
  }
  return { on, port, host, scope: flags.scope }
}

/** A runner's metrics as the command serves them: its own, and the process's (CPU, memory, event loop). */
export interface CliMetrics {
  readonly registry: MetricsSource
  close(): void
}

/**
 * Makes the runner's metrics and the process's own (collectProcessMetrics:
 * prom-client's defaults less those `promtool check metrics` refuses),
 * loading prom-client only now: an optional peer dependency, named when
 * missing.
 */
export async function openMetrics(runner: Runner): Promise<CliMetrics> {
  let loaded: typeof import('../metrics/index.js')
  try {
    loaded = await import('../metrics/index.js')
  } catch (err) {
    if (isMissingPackage(err, 'prom-client')) throw new CliFailure('metrics need the prom-client package, which is not installed: npm install prom-client@15')
    throw err
  }
  const { collectProcessMetrics, createMetrics } = loaded
  const metrics = createMetrics({ runner })
  collectProcessMetrics(metrics.registry)
  return metrics
}

/** Serves GET /metrics alone on a listener of its own (every other path 404), behind the tokens when there are any. */
export async function listenMetrics(registry: MetricsSource, plan: MetricsPlan & { port: number }, authorize: Authorize | undefined, scopes: string[]): Promise<Listening> {
  const handler = metricsHandler(registry, authorize === undefined ? {} : { authorize, scopes })
  const api = {
    fetch: (request: Request) => (new URL(request.url).pathname === '/metrics' ? handler(request) : Promise.resolve(problem('route_not_found'))),
    close: () => undefined,
  }
  return listen(api, { host: plan.host, port: plan.port, authenticated: authorize !== undefined, maxConnections: 32 })
}
