/**
 * The longest a chain of batches runs on microtasks alone before it waits
 * for a turn of the event loop. Jobs whose handlers return at once, over
 * SQLite's synchronous calls, finish, write and claim on microtasks only:
 * without this, a backlog drained without ever letting timers, sockets or
 * an HTTP request in (a 1 ms timer waited for the whole drain).
 */
const TURN_EVERY_MS = 10

/**
 * Collects the items added before the current microtasks run out and
 * hands them to `process` together, one batch at a time. This is how concurrent
 * enqueues share a transaction and how finished jobs are group-committed:
 * each caller still waits for the write that holds its own item, so the
 * batching is invisible to it. Items added while a batch is being written
 * form the next batch, which waits one turn of the event loop after that
 * write lands: the callers it answered then add their next items to it
 * too. (Without that turn, ten workers whose jobs finish unevenly fall
 * into two alternating writes, of 8 and 2 jobs, each waiting for the
 * other: half the jobs per write.)
 */
export class Batcher<T> {
  readonly #process: (items: T[]) => Promise<ItemErrors>
  readonly #maxBatch: number
  #queue: { item: T; resolve: () => void; reject: (err: unknown) => void }[] = []
  #running = false
  #idle: (() => void)[] = []
  /** When the pending turn marker was set (see #starved); -1 when none is pending. */
  #markerSince = -1

  /**
   * `process` writes a batch. It may throw, refusing every item with that
   * error, or return one entry per item: undefined where the item was
   * written, the error that refused it otherwise.
   */
  constructor(process: (items: T[]) => Promise<ItemErrors>, maxBatch = 1000) {
    this.#process = process
    this.#maxBatch = maxBatch
  }

  /** Resolves once the batch holding item is written; rejects with the batch's error. */
  add(item: T): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ item, resolve, reject })
      if (!this.#running) {
        this.#running = true
        // A microtask, not setImmediate: a lone write starts at once, and
        // concurrent callers whose awaits resolve together still share it;
        // but a turn of the event loop first once TURN_EVERY_MS have gone by.
        if (this.#starved()) setImmediate(() => void this.#drain())
        else queueMicrotask(() => void this.#drain())
      }
    })
  }

  /** Whether items wait for a write or are being written. */
  get busy(): boolean {
    return this.#running
  }

  /** Resolves when every item added so far has been written or refused. */
  idle(): Promise<void> {
    if (!this.#running) return Promise.resolve()
    return new Promise((resolve) => this.#idle.push(resolve))
  }

  /**
   * Whether the event loop has had no turn for TURN_EVERY_MS: a marker
   * set on an immediate is cleared at the loop's next turn, so one still
   * pending that long means only microtasks have run since.
   */
  #starved(): boolean {
    const now = performance.now()
    if (this.#markerSince < 0) {
      this.#markerSince = now
      setImmediate(() => (this.#markerSince = -1))
      return false
    }
    return now - this.#markerSince >= TURN_EVERY_MS
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch)
      try {
        const errors = await this.#process(batch.map((b) => b.item))
        batch.forEach((b, i) => {
          const err = errors?.[i]
          if (err === undefined) b.resolve()
          else b.reject(err)
        })
      } catch (err) {
        for (const b of batch) b.reject(err)
      }
      // Items already wait for the next write: let the callers just
      // answered run first, so what they add goes out in that write too.
      if (this.#queue.length > 0) await new Promise((resolve) => setImmediate(resolve))
    }
    this.#running = false
    for (const resolve of this.#idle.splice(0)) resolve()
  }
}

/** Per item of a batch: undefined where it was written, the error that refused it otherwise; void when all were written. */
export type ItemErrors = readonly unknown[] | void
