import { context, propagation, trace, type SpanContext } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { CompositePropagator, W3CBaggagePropagator, W3CTraceContextPropagator } from '@opentelemetry/core'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan, type SpanExporter } from '@opentelemetry/sdk-trace-base'

/**
 * An OpenTelemetry SDK as an application installs one: a tracer provider
 * exporting every span as it ends, AsyncLocalStorage for the active
 * context, and the W3C trace-context and baggage propagators. Registered
 * globally until `uninstall`, which unregisters all three so the next
 * test starts without an SDK.
 */
export function installTracing(exporter: SpanExporter = new InMemorySpanExporter()) {
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  trace.setGlobalTracerProvider(provider)
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
  propagation.setGlobalPropagator(new CompositePropagator({ propagators: [new W3CTraceContextPropagator(), new W3CBaggagePropagator()] }))
  return {
    exporter,
    /** A tracer of the test's own, for parent spans and the spans a handler makes. */
    tracer: trace.getTracer('jobtable-test'),
    async uninstall() {
      await provider.shutdown()
      trace.disable()
      context.disable()
      propagation.disable()
    },
  }
}

/** Resolves to the finished spans once `ok` holds for them; a run's span ends just after its job's end is reported. */
export async function spansWhen(exporter: InMemorySpanExporter, ok: (spans: readonly ReadableSpan[]) => boolean): Promise<ReadableSpan[]> {
  for (;;) {
    const spans = exporter.getFinishedSpans()
    if (ok(spans)) return spans
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** The one finished span named `name`; throws when there is none or more than one. */
export function only(spans: readonly ReadableSpan[], name: string): ReadableSpan {
  const found = spans.filter((s) => s.name === name)
  if (found.length !== 1) throw new Error(`expected one span named ${JSON.stringify(name)}, found ${found.length}: ${spans.map((s) => s.name).join(', ')}`)
  return found[0]!
}

/** Whether `child`'s parent is the span whose context is `parent` (same trace, parent span id). */
export function isChildOf(child: ReadableSpan, parent: SpanContext): boolean {
  return child.spanContext().traceId === parent.traceId && child.parentSpanContext?.spanId === parent.spanId
}

/** Everything a span holds that an exporter would send, as text, to scan for secrets. */
export function spanText(span: ReadableSpan): string {
  return JSON.stringify({
    name: span.name,
    attributes: span.attributes,
    events: span.events,
    status: span.status,
    links: span.links,
    resource: span.resource.attributes,
  })
}
