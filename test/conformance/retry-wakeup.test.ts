import { expect, it } from 'vitest'
import { z } from 'zod'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { track } from '../support/wait.js'

describeEachBackend('a retry runs at its due time', (backend) => {
  const h = harness(backend)

  it('with the real clock, no wake and no poll: the scheduler is told the retry’s due time and runs it then', async () => {
    // A poll an hour apart: only the scheduler's own timer can start the second attempt within the test.
    const runner = h.runner({ workers: 1, driver: h.store.driver({ pollIntervalMs: 3_600_000 } as never) })
    const attempts: number[] = []
    const kind = runner.register('flaky', {
      payload: z.strictObject({}),
      failures: ['provider_unavailable'],
      retry: { maxAttempts: 2, codes: ['provider_unavailable'], backoff: { baseMs: 100, maxMs: 100 } },
      handler: (_p, job) => {
        attempts.push(job.attempt)
        if (job.attempt === 1) job.fail('provider_unavailable')
      },
    })
    const done = track(runner)
    await runner.start()
    const id = await kind.enqueue({})
    await done.starts(2)
    for (;;) {
      const job = await runner.get(id)
      if (job.status === 'succeeded') break
      await new Promise((resolve) => setTimeout(resolve, 10))
    }
    expect(attempts).toEqual([1, 2])
  })
})
