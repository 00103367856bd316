import { DatabaseError, JobNotFoundError, type Job, type Runner } from '../index.js'
import type { ChangeFeed } from './change-feed.js'
import { TERMINAL, jobBody } from './job-body.js'

/** How a job's event stream is fed; see createApi's options. */
export interface EventStreamOptions {
  readonly runner: Runner
  readonly id: string
  /** The caller's scope: every read is made within it. */
  readonly scope: string | null
  /** The job as first read, already known to be in scope. */
  readonly first: Job
  /** Says when the job may have changed. */
  readonly feed: ChangeFeed
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
 * The job is read again through `runner.get` each time the API's change
 * feed says it may have changed (see ChangeFeed: at once for a job run in
 * this process, by the cheapest signal the store has for other
 * processes'), and a comment line keeps the stream open after
 * `heartbeatMs` without a message.
 */
export function eventStream(options: EventStreamOptions): Response {
  const { runner, id, scope, first, heartbeatMs, signal, feed } = options
  let ended = false
  /** A change was signalled since the last read: read again without waiting. True at first: `first` was read before the watch began. */
  let pending = true
  let wake: (() => void) | undefined
  const end = () => {
    ended = true
    wake?.()
  }

  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      const untrack = options.track(end)
      signal.addEventListener('abort', end, { once: true })
      const unwatch = feed.watch(id, () => {
        pending = true
        wake?.()
      })
      let lastSent = performance.now()
      const send = (text: string) => {
        if (ended) return
        lastSent = performance.now()
        controller.enqueue(encoder.encode(text))
      }
      void (async () => {
        let job = first
        let last = ''
        let seq = 0
        try {
          for (;;) {
            const data = JSON.stringify(jobBody(job))
            if (data !== last) {
              last = data
              send(`${seq === 0 ? 'retry: 5000\n' : ''}event: job\nid: ${++seq}\ndata: ${data}\n\n`)
            }
            if (TERMINAL.has(job.status) || ended) break
            if (!pending) await nap(Math.max(1, heartbeatMs - (performance.now() - lastSent)), (w) => (wake = w))
            wake = undefined
            if (ended) break
            if (performance.now() - lastSent >= heartbeatMs) send(': keep-alive\n\n') // so proxies do not cut an idle stream
            if (!pending) continue
            pending = false
            try {
              job = await runner.get(id, { scope })
            } catch (err) {
              if (err instanceof DatabaseError && err.transient) {
                pending = true // busy: look again at the next signal or heartbeat
                await nap(50, (w) => (wake = w))
                continue
              }
              // Not found (deleted) or a store that cannot be read: say so without detail, then end.
              send(`event: error\ndata: ${JSON.stringify({ code: err instanceof JobNotFoundError ? 'not_found' : 'internal_error' })}\n\n`)
              break
            }
          }
        } finally {
          unwatch()
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
