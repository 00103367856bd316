import { createRequire } from 'node:module'
import {
  context,
  isSpanContextValid,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api'
import type { ClaimedJob } from '../driver.js'
import { JobtableError } from '../errors.js'

/**
 * OpenTelemetry traces through `@opentelemetry/api` alone: a PRODUCER
 * span for each enqueue call inside a trace, a CONSUMER span for each
 * run, and the enqueue's trace context stored with the job (as the
 * application's propagator writes it) so the run joins the enqueue's
 * trace in whichever process runs it. Without an SDK every function here
 * returns after a lookup or two, making no span and storing nothing.
 *
 * Attributes follow the OpenTelemetry messaging conventions where they
 * fit. A span never holds a payload, a result, a scope or a handler's
 * error text: a failure is told by its code alone.
 */

/** The instrumentation scope's name, and messaging.system's value. */
const NAME = 'jobtable'

/**
 * The most characters of trace context stored with a job. traceparent and
 * tracestate take at most about 600; a propagator that writes more (a
 * large baggage) carries nothing rather than weigh on every row.
 */
export const CARRIED_MAX = 8192

/** jobtable's version, for the tracer; read from package.json at the first span (undefined when that fails, as in a bundle). */
let version: string | undefined | null = null

function packageVersion(): string | undefined {
  if (version === null) {
    try {
      // src/runner/ and dist/runner/ both sit two levels below the package root.
      version = (createRequire(import.meta.url)('../../package.json') as { version?: string }).version
    } catch {
      version = undefined
    }
  }
  return version
}

/**
 * The tracer of the SDK the application installed, or undefined when it
 * installed none. The API's global provider is a proxy until an SDK sets
 * its delegate: asking the proxy for the delegate's tracer costs a lookup
 * and makes nothing, where getTracer and startSpan would make a no-op
 * tracer and span on every job. A provider that is not the API's proxy
 * (set by another copy of the API) is asked for a tracer.
 */
function sdkTracer(): Tracer | undefined {
  const provider = trace.getTracerProvider() as ReturnType<typeof trace.getTracerProvider> & {
    getDelegateTracer?: (name: string, version?: string) => Tracer | undefined
  }
  if (typeof provider.getDelegateTracer === 'function') return provider.getDelegateTracer(NAME, packageVersion())
  return provider.getTracer(NAME, packageVersion())
}

/** An enqueue's span, and the trace context its jobs store: the propagator's fields as JSON text, null when it wrote none. */
export interface EnqueueTrace {
  readonly span: Span
  readonly carried: string | null
}

/**
 * Starts the span of one enqueue call of `kind`, a child of the active
 * span; `batch` is how many payloads an enqueueMany gives. Outside a
 * trace (no valid active span, as always without an SDK) it starts
 * nothing and returns undefined: the jobs carry no context, and each run
 * starts a trace of its own.
 */
export function startEnqueue(kind: string, batch?: number): EnqueueTrace | undefined {
  const parent = trace.getActiveSpan()
  if (parent === undefined || !isSpanContextValid(parent.spanContext())) return undefined
  try {
    return enqueueSpan(kind, batch)
  } catch {
    // An SDK that throws: the enqueue goes on untraced.
    return undefined
  }
}

function enqueueSpan(kind: string, batch: number | undefined): EnqueueTrace | undefined {
  const tracer = sdkTracer()
  if (tracer === undefined) return undefined
  const active = context.active()
  const attributes: Attributes = {
    'messaging.system': NAME,
    'messaging.operation.type': 'send',
    'messaging.operation.name': 'enqueue',
    'messaging.destination.name': kind,
  }
  if (batch !== undefined) attributes['messaging.batch.message_count'] = batch
  const span = tracer.startSpan(`jobtable enqueue ${kind}`, { kind: SpanKind.PRODUCER, attributes }, active)
  return { span, carried: carry(trace.setSpan(active, span)) }
}

/**
 * Ends an enqueue's span once its jobs are stored. `id` is a single
 * enqueue's job id (the holder's when a live job held its unique key:
 * `created` false).
 */
export function enqueued(t: EnqueueTrace, id?: string, created = true): void {
  if (id !== undefined) t.span.setAttribute('messaging.message.id', id)
  if (!created) t.span.setAttribute('jobtable.job.created', false)
  t.span.end()
}

/** Ends an enqueue's span as failed, with the error's code alone (its message may quote the payload). */
export function enqueueFailed(t: EnqueueTrace, err: unknown): void {
  const code = err instanceof JobtableError ? err.code : 'unexpected'
  t.span.setAttribute('error.type', code)
  t.span.setStatus({ code: SpanStatusCode.ERROR, message: code })
  t.span.end()
}

/** The trace context of `ctx` as the application's propagator writes it, as JSON text; null when it writes nothing, fails, or writes too much. */
function carry(ctx: Context): string | null {
  const carrier: Record<string, string> = {}
  try {
    propagation.inject(ctx, carrier)
  } catch {
    return null
  }
  for (const _ in carrier) {
    const text = JSON.stringify(carrier)
    return text.length <= CARRIED_MAX ? text : null
  }
  return null
}

/** The context a job's stored trace context stands for; the root context for text that is not a carrier (another writer's, damaged). */
function extractCarried(text: string): Context {
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return ROOT_CONTEXT
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return ROOT_CONTEXT
  const carrier: Record<string, string> = {}
  for (const [key, value] of Object.entries(parsed)) if (typeof value === 'string') carrier[key] = value
  try {
    return propagation.extract(ROOT_CONTEXT, carrier)
  } catch {
    return ROOT_CONTEXT
  }
}

/** A run's span, and the context its handler runs in: the span's, over what the job carried (its baggage included). */
export interface RunTrace {
  readonly span: Span
  readonly context: Context
}

/**
 * How a run ended, for its span: `outcome` one of succeeded, failed,
 * retry (a failure with attempts left), snoozed, cancelled, or
 * interrupted (nothing recorded: a shutdown, or a stop that stopped
 * waiting); `code` the failure code of a run that failed.
 */
export interface SpanEnd {
  readonly outcome: 'succeeded' | 'failed' | 'retry' | 'snoozed' | 'cancelled' | 'interrupted'
  readonly code?: string
}

/**
 * Starts the span of one run of a claimed job: a child of the enqueue's
 * context the job carries, or a root when it carries none. Undefined
 * without an SDK.
 */
export function startRun(job: ClaimedJob): RunTrace | undefined {
  try {
    return runSpan(job)
  } catch {
    // An SDK that throws: the job runs untraced.
    return undefined
  }
}

function runSpan(job: ClaimedJob): RunTrace | undefined {
  const tracer = sdkTracer()
  if (tracer === undefined) return undefined
  // Never the active context: the claim loop's may be whatever span was active when the runner started.
  const parent = job.traceContext === undefined || job.traceContext === null ? ROOT_CONTEXT : extractCarried(job.traceContext)
  const span = tracer.startSpan(
    `jobtable run ${job.kind}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        'messaging.system': NAME,
        'messaging.operation.type': 'process',
        'messaging.operation.name': 'run',
        'messaging.destination.name': job.kind,
        'messaging.message.id': job.id,
        'jobtable.job.attempt': job.attempt,
      },
    },
    parent,
  )
  return { span, context: trace.setSpan(parent, span) }
}

/** Runs `fn` (a handler) within the run's context, so the spans it makes are the run span's children. */
export function withinRun<T>(t: RunTrace | undefined, fn: () => T): T {
  return t === undefined ? fn() : context.with(t.context, fn)
}

/**
 * Ends a run's span with its outcome. A failure's span has the status
 * ERROR with the failure code alone (never what the handler threw); so
 * has an interrupted run's, described as `interrupted`.
 */
export function endRun(t: RunTrace, end: SpanEnd): void {
  t.span.setAttribute('jobtable.job.outcome', end.outcome)
  if (end.code !== undefined) {
    t.span.setAttributes({ 'jobtable.job.error_code': end.code, 'error.type': end.code })
    t.span.setStatus({ code: SpanStatusCode.ERROR, message: end.code })
  } else if (end.outcome === 'interrupted') {
    t.span.setAttribute('error.type', 'interrupted')
    t.span.setStatus({ code: SpanStatusCode.ERROR, message: 'interrupted' })
  }
  t.span.end()
}
