/**
 * A runner in its own process with an OpenTelemetry SDK installed, for the
 * tracing multi-process test. Backend as in worker-process.ts (JT_BACKEND
 * with JT_SQLITE_PATH, or JT_PG_URL and JT_SCHEMA). Runs the kind
 * `traced`, whose handler makes a span `handler work` of its own. Every
 * span that ends is appended to JT_SPANS as one JSON line: `{ name,
 * traceId, spanId, parentSpanId, kind, attributes, status }`. Prints
 * `ready <runner id>` once started; SIGTERM closes the runner.
 */
import { appendFileSync } from 'node:fs'
import { z } from 'zod'
import { context, propagation, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { ExportResultCode, W3CTraceContextPropagator, type ExportResult } from '@opentelemetry/core'
import { BasicTracerProvider, SimpleSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base'
import { Runner, type Driver } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { sqlite } from 'jobtable/sqlite'

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`traced-worker: ${name} is required`)
  return value
}
const spansFile = env('JT_SPANS')

/** Writes each finished span as a JSON line, so the test process reads this process's spans. */
const exporter: SpanExporter = {
  export(spans: ReadableSpan[], done: (result: ExportResult) => void) {
    for (const s of spans) {
      const line = {
        name: s.name,
        traceId: s.spanContext().traceId,
        spanId: s.spanContext().spanId,
        parentSpanId: s.parentSpanContext?.spanId,
        kind: s.kind,
        attributes: s.attributes,
        status: s.status,
      }
      appendFileSync(spansFile, JSON.stringify(line) + '\n')
    }
    done({ code: ExportResultCode.SUCCESS })
  },
  async shutdown() {},
}
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
trace.setGlobalTracerProvider(provider)
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
propagation.setGlobalPropagator(new W3CTraceContextPropagator())

const driver: Driver =
  env('JT_BACKEND') === 'postgres'
    ? postgres({ connectionString: env('JT_PG_URL'), schema: env('JT_SCHEMA') })
    : // A short poll: a job the test process enqueued is found without its wake.
      sqlite({ path: env('JT_SQLITE_PATH'), pollIntervalMs: 50 })
const runner = new Runner({ driver, workers: 2, logger: { debug() {}, info() {}, warn() {}, error() {} } })
const tracer = trace.getTracer('traced-worker')
runner.register('traced', {
  payload: z.strictObject({ n: z.number().int() }),
  handler: async () => {
    await Promise.resolve()
    tracer.startSpan('handler work').end()
  },
})
await runner.start()
process.stdout.write(`ready ${runner.id}\n`)
process.on('SIGTERM', () => {
  void runner
    .close()
    .then(() => provider.shutdown())
    .then(() => process.exit(0))
})
