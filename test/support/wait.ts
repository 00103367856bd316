import { jobEndChannel, jobStartChannel, type Job, type Runner } from 'jobtable'

interface JobEventMessage {
  runnerId: string
  jobId: string
}

/**
 * Records the job starts and ends a runner reports on its diagnostics
 * channels, so a test waits on events rather than on a clock. Create it
 * before the jobs can start.
 */
export function track(runner: Runner) {
  const started: string[] = []
  const ended = new Set<string>()
  let waiters: (() => void)[] = []
  const notify = () => {
    const current = waiters
    waiters = []
    for (const w of current) w()
  }
  const onStart = (m: unknown) => {
    if ((m as JobEventMessage).runnerId !== runner.id) return
    started.push((m as JobEventMessage).jobId)
    notify()
  }
  const onEnd = (m: unknown) => {
    if ((m as JobEventMessage).runnerId !== runner.id) return
    ended.add((m as JobEventMessage).jobId)
    notify()
  }
  jobStartChannel.subscribe(onStart)
  jobEndChannel.subscribe(onEnd)
  const until = async (ok: () => boolean) => {
    while (!ok()) await new Promise<void>((resolve) => waiters.push(resolve))
  }
  return {
    started,
    ended,
    /** Resolves once n jobs have started in all. */
    starts: (n: number) => until(() => started.length >= n),
    /** Resolves once every job in ids has had its final write made or given up. */
    ends: (ids: readonly string[]) => until(() => ids.every((id) => ended.has(id))),
    stop: () => {
      jobStartChannel.unsubscribe(onStart)
      jobEndChannel.unsubscribe(onEnd)
    },
  }
}

/** Polls get() until the job satisfies the predicate; for states no event marks. */
export async function until(runner: Runner, id: string, ok: (job: Job) => boolean): Promise<Job> {
  for (;;) {
    const job = await runner.get(id)
    if (ok(job)) return job
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

/** A promise with its resolve function outside, for handlers a test releases by hand. */
export function gate<T = void>(): { promise: Promise<T>; open(value: T): void } {
  let open!: (value: T) => void
  const promise = new Promise<T>((resolve) => (open = resolve))
  return { promise, open }
}

/** Resolves once signal has aborted, even if it already had. */
export function aborted(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve()
  return new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }))
}

/**
 * Runs `op` again while the database refuses it for a transient reason
 * (SQLITE_BUSY while other processes write the file), as an application
 * would: up to `tries` times, waiting 10 ms longer each time.
 */
export async function retryTransient<T>(op: () => Promise<T>, tries = 20): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await op()
    } catch (err) {
      if ((err as { transient?: unknown } | null)?.transient !== true || attempt >= tries) throw err
      await new Promise((resolve) => setTimeout(resolve, 10 * attempt))
    }
  }
}
