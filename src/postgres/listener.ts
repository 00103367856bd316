import pg from 'pg'
import type { WakeReason } from '../driver.js'
import { Backoff, sleep } from '../runner/backoff.js'

/**
 * A dedicated connection that LISTENs for the notifications of inserted
 * jobs (and of cancellations: payload `<schema>:cancel`) and calls `onNotify` for those of one schema. When the connection
 * drops (a restart, pg_terminate_backend, a network fault) it reconnects
 * with backoff from 50 ms doubling to 5 s, and calls `onNotify` once
 * listening again, since inserts made meanwhile sent notifications no one
 * heard. Errors are not reported: the runner's fallback poll (WakePoll)
 * covers every moment this connection is down.
 */
export class NotificationListener {
  readonly #config: pg.ClientConfig
  readonly #channel: string
  readonly #schema: string
  readonly #onNotify: (what: WakeReason) => void
  readonly #stopping = new AbortController()
  #loop: Promise<void> | undefined

  constructor(config: pg.ClientConfig, channel: string, schema: string, onNotify: (what: WakeReason) => void) {
    this.#config = config
    this.#channel = channel
    this.#schema = schema
    this.#onNotify = onNotify
  }

  /** Starts listening in the background. */
  start(): void {
    this.#loop ??= this.#run()
  }

  /** Stops listening and closes the connection. */
  async stop(): Promise<void> {
    this.#stopping.abort()
    await this.#loop
  }

  /** The signal that aborts at stop(). Only for tests, which count its listeners. */
  get stopSignal(): AbortSignal {
    return this.#stopping.signal
  }

  async #run(): Promise<void> {
    const backoff = new Backoff()
    const stopping = this.#stopping.signal
    while (!stopping.aborted) {
      const client = new pg.Client(this.#config)
      let onStop!: () => void
      const lost = new Promise<void>((resolve) => {
        onStop = () => resolve()
        client.on('error', () => resolve())
        client.on('end', () => resolve())
        stopping.addEventListener('abort', onStop, { once: true })
      })
      client.on('notification', (msg) => {
        if (msg.channel !== this.#channel) return
        if (msg.payload === this.#schema) this.#onNotify('jobs')
        else if (msg.payload === `${this.#schema}:cancel`) this.#onNotify('cancel')
        else if (msg.payload === `${this.#schema}:change`) this.#onNotify('change')
      })
      try {
        await client.connect()
        await client.query(`LISTEN ${this.#channel}`)
        backoff.reset()
        this.#onNotify('jobs')
        this.#onNotify('cancel')
        await lost
      } catch {
        // Refused or dropped: try again after the backoff.
      } finally {
        // One connection's listener at a time: a long-lived listener that
        // reconnects many times must not pile them up on the signal.
        stopping.removeEventListener('abort', onStop)
        await client.end().catch(() => undefined)
      }
      if (!stopping.aborted) await sleep(backoff.next(), stopping)
    }
  }
}
