import { DatabaseError, JobNotFoundError, jobEndChannel, type Job, type Runner } from '../index.js'
import { TERMINAL, jobBody } from './job-body.js'

/** How a job's event stream is fed; see createApi's options. */
export interface EventStreamOptions {
  readonly runner: Runner
  readonly id: string
  /** The caller's scope: every read is made within it. */
  readonly scope: string | null
  /** The job as first read, already known to be in scope. */
  readonly first: Job
  readonly pollMs: number
  readonly heartbeatMs: number
  /** Aborts when the client goes away. */
  readonly signal: AbortSignal
  /** Registers the stream so the API's close() can end it; returns the unregister function. */
  readonly track: (end: () => void) => () => void
}

const encoder = new TextEncoder()

/**
 * A Server-Sent Events response of one job: an `event: job` message with
 * the job's public fields first and at every change of status or result,
 * the stream ending after the message that shows a terminal status.
 *
 * Changes are found by reading the job through `runner.get` every
 * `pollMs`: the store is the only thing every process shares, so this sees
 * a job run by another process too. A job ending in this process wakes the
 * stream at once through the runner's diagnostics channel. Partial results
 * have no such signal in the core, so they are seen at the next poll.
 */
export function eventStream(options: EventStreamOptions): Response {
  const { runner, id, scope, first, pollMs, heartbeatMs, signal } = options
  let ended = false
  let wake: (() => void) | undefined
  const end = () => {
    ended = true
    wake?.()
  }
  const onJobEnd = (message: unknown) => {
    if ((message as { jobId?: unknown }).jobId === id) wake?.()
  }

  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const untrack = options.track(end)
      signal.addEventListener('abort', end, { once: true })
      jobEndChannel.subscribe(onJobEnd)
      const send = (text: string) => {
        if (!ended) controller.enqueue(encoder.encode(text))
      }
      void (async () => {
        let job = first
        let last = ''
        let seq = 0
        let quiet = 0
        try {
          for (;;) {
            const data = JSON.stringify(jobBody(job))
            if (data !== last) {
              last = data
              quiet = 0
              send(`${seq === 0 ? 'retry: 5000\n' : ''}event: job\nid: ${++seq}\ndata: ${data}\n\n`)
            }
            if (TERMINAL.has(job.status) || ended) break
            await nap(pollMs, (w) => (wake = w))
            if (ended) break
            quiet += pollMs
            if (quiet >= heartbeatMs) {
              quiet = 0
              send(': keep-alive\n\n') // so proxies do not cut an idle stream
            }
            try {
              job = await runner.get(id, { scope })
            } catch (err) {
              if (err instanceof DatabaseError && err.transient) continue // busy: look again next time
              // Not found (deleted) or a store that cannot be read: say so without detail, then end.
              send(`event: error\ndata: ${JSON.stringify({ code: err instanceof JobNotFoundError ? 'not_found' : 'internal_error' })}\n\n`)
              break
            }
          }
        } finally {
          jobEndChannel.unsubscribe(onJobEnd)
          signal.removeEventListener('abort', end)
          untrack()
          ended = true
          try {
            controller.close()
          } catch {
            // already cancelled by the client
          }
        }
      })()
    },
    cancel() {
      end()
    },
  })
  return new Response(stream, {
    status: 200,
    headers: {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      // Tells nginx not to buffer the stream.
      'x-accel-buffering': 'no',
    },
  })
}

/** Waits ms, or less when the wake function handed to `onWake` is called. */
function nap(ms: number, onWake: (wake: () => void) => void): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms)
    onWake(() => {
      clearTimeout(timer)
      resolve()
    })
  })
}
