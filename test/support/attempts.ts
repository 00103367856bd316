import { jobEndChannel, type Runner } from 'jobtable'

interface JobEndMessage {
  runnerId: string
  jobId: string
  status: string
  error: string | null
}

/**
 * Counts every final write a runner reports per job, a retry or a snooze
 * included (status 'retry' or 'snoozed'), where `track` keeps only whether a job ended
 * at all: a test of retries waits for the nth end of one job.
 */
export function endsOf(runner: Runner) {
  const ends = new Map<string, { status: string; error: string | null }[]>()
  let waiters: (() => void)[] = []
  const onEnd = (m: unknown) => {
    const msg = m as JobEndMessage
    if (msg.runnerId !== runner.id) return
    const list = ends.get(msg.jobId) ?? []
    list.push({ status: msg.status, error: msg.error })
    ends.set(msg.jobId, list)
    const current = waiters
    waiters = []
    for (const w of current) w()
  }
  jobEndChannel.subscribe(onEnd)
  return {
    /** The final writes of a job so far, in order: `{ status: 'retry' | 'snoozed' | 'succeeded' | 'failed', error }`. */
    of: (id: string) => ends.get(id) ?? [],
    /** Resolves once the job has had n final writes on this runner. */
    async nth(id: string, n: number): Promise<void> {
      while ((ends.get(id)?.length ?? 0) < n) await new Promise<void>((resolve) => waiters.push(resolve))
    },
    stop: () => jobEndChannel.unsubscribe(onEnd),
  }
}

/** Counts handler starts by job id, and the `job.attempt` each start saw. */
export function ledger() {
  const attempts = new Map<string, number[]>()
  return {
    /** Call first thing in a handler. */
    start(id: string, attempt: number): void {
      attempts.set(id, [...(attempts.get(id) ?? []), attempt])
    },
    /** How many times the job's handler started. */
    starts: (id: string) => attempts.get(id)?.length ?? 0,
    /** The `job.attempt` of each start, in order. */
    attempts: (id: string) => attempts.get(id) ?? [],
  }
}
