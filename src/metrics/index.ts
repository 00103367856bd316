/**
 * jobtable/metrics: Prometheus metrics of a runner through prom-client,
 * an optional peer dependency (`npm install prom-client@15`) that nothing
 * else in jobtable loads.
 *
 * ```ts
 * import { collectProcessMetrics, createMetrics } from 'jobtable/metrics'
 * const metrics = createMetrics({ runner })
 * collectProcessMetrics(metrics.registry) // the process's own: CPU, memory, event loop
 * const api = createApi({ runner, metrics: metrics.registry }) // GET /metrics
 * // or anywhere else: metricsHandler(metrics.registry) is a fetch handler
 * ```
 */
export { collectProcessMetrics, createMetrics, DEFAULT_BUCKETS, OTHER, type Metrics, type MetricsOptions } from './metrics.js'
export { metricsHandler, type MetricsHandlerOptions, type MetricsSource } from '../http/metrics.js'
