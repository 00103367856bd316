import { expect, it } from 'vitest'
import { defineKind, InvalidArgumentError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'

describeEachBackend('counting jobs by kind and status', (backend) => {
  const h = harness(backend)

  it("counts each scope's jobs by kind and status, sorted by kind then lifecycle; unscoped and every scope apart", async () => {
    const runner = h.runner({ workers: 2 })
    const echo = runner.register('echo', { payload: echoPayload, failures: ['bad_input'], handler: ({ n }, job) => (n < 0 ? job.fail('bad_input') : undefined) })
    const later = runner.register('b_later', { payload: echoPayload, handler: () => undefined })
    const other = runner.register(defineKind('a_other', { payload: echoPayload }))
    expect(await runner.counts()).toEqual([])
    const done = track(runner)
    const ran = [
      await echo.enqueue({ n: 1 }, { scope: 'h1' }),
      await echo.enqueue({ n: 2 }, { scope: 'h1' }),
      await echo.enqueue({ n: -1 }, { scope: 'h1' }),
      await echo.enqueue({ n: 3 }),
    ]
    await runner.start()
    await done.ends(ran)
    await later.enqueue({ n: 1 }, { scope: 'h1', delayMs: 3_600_000 })
    await runner.cancel(await later.enqueue({ n: 2 }, { scope: 'h1', delayMs: 3_600_000 }), { scope: 'h1' })
    // a_other has no handler here: its jobs stay queued.
    await other.enqueue({ n: 1 }, { scope: 'h1' })
    await other.enqueue({ n: 2 }, { scope: 'h2' })

    expect(await runner.counts({ scope: 'h1' })).toEqual([
      { kind: 'a_other', status: 'queued', count: 1 },
      { kind: 'b_later', status: 'scheduled', count: 1 },
      { kind: 'b_later', status: 'cancelled', count: 1 },
      { kind: 'echo', status: 'succeeded', count: 2 },
      { kind: 'echo', status: 'failed', count: 1 },
    ])
    expect(await runner.counts({ scope: 'h2' })).toEqual([{ kind: 'a_other', status: 'queued', count: 1 }])
    expect(await runner.counts({ scope: null })).toEqual([{ kind: 'echo', status: 'succeeded', count: 1 }])
    expect(await runner.counts({ scope: 'nobody' })).toEqual([])
    expect(await runner.counts()).toEqual([
      { kind: 'a_other', status: 'queued', count: 2 },
      { kind: 'b_later', status: 'scheduled', count: 1 },
      { kind: 'b_later', status: 'cancelled', count: 1 },
      { kind: 'echo', status: 'succeeded', count: 3 },
      { kind: 'echo', status: 'failed', count: 1 },
    ])
  })

  it('refuses an unknown option or a scope that is not a string or null', async () => {
    const runner = h.runner()
    await expect(runner.counts({ scope: 'h1', status: 'queued' } as never)).rejects.toBeInstanceOf(InvalidArgumentError)
    await expect(runner.counts({ scope: 7 } as never)).rejects.toBeInstanceOf(InvalidArgumentError)
  })
})
