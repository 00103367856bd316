import { expect, it } from 'vitest'
import { InvalidArgumentError, InvalidPayloadError, JobNotFoundError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'

describeEachBackend('transactional enqueue', (backend) => {
  const h = harness(backend)

  it('the job exists exactly when the transaction commits, and a wake after commit runs it', async () => {
    const runner = h.runner({ workers: 1 })
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const done = track(runner)
    await runner.start()

    const enqueued: unknown[] = []
    // The enqueue is returned so a backend whose enqueueTx is asynchronous (PostgreSQL) awaits it before COMMIT.
    await h.store.transaction((tx) => enqueued[enqueued.push(kind.enqueueTx(tx as never, { n: 1 })) - 1], 'rollback')
    const rolledBack = (await enqueued[0]) as string
    await expect(runner.get(rolledBack)).rejects.toBeInstanceOf(JobNotFoundError)

    // The enqueue is returned so a backend whose enqueueTx is asynchronous (PostgreSQL) awaits it before COMMIT.
    await h.store.transaction((tx) => enqueued[enqueued.push(kind.enqueueTx(tx as never, { n: 2 })) - 1], 'commit')
    const committed = (await enqueued[1]) as string
    // Where a commit wakes idle runners by itself (PostgreSQL), the job may already have started.
    expect(backend.wakesOnCommit ? ['queued', 'running', 'succeeded'] : ['queued']).toContain((await runner.get(committed)).status)
    kind.wake()
    await done.ends([committed])
    expect((await runner.get(committed)).status).toBe('succeeded')
    await expect(runner.get(rolledBack)).rejects.toBeInstanceOf(JobNotFoundError)
  })

  it('refuses an invalid payload inside the transaction without storing it', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    let refused: unknown
    await h.store.transaction(async (tx) => {
      try {
        await kind.enqueueTx(tx as never, { n: 'one' } as never)
      } catch (err) {
        refused = err
      }
    }, 'commit')
    expect(refused).toBeInstanceOf(InvalidPayloadError)
    expect((await runner.list()).jobs).toEqual([])
  })

  it('refuses bad options as the backend answers the call: a throw where enqueueTx returns the id (SQLite), a rejected promise where it returns a promise (PostgreSQL)', async () => {
    const runner = h.runner()
    const kind = runner.register('echo', { payload: echoPayload, handler: () => undefined })
    const outcomes: string[] = []
    for (const options of [{ priority: 1.5 }, { timeoutMs: -1 }, { uniqueKey: '' }]) {
      await h.store.transaction((tx) => {
        let answer: unknown
        try {
          answer = kind.enqueueTx(tx as never, { n: 1 }, options as never)
        } catch (err) {
          outcomes.push(`threw ${(err as Error).constructor.name}`)
          return
        }
        if (!(answer instanceof Promise)) return void outcomes.push('returned')
        return answer.then(() => void outcomes.push('resolved'), (err: unknown) => void outcomes.push(`rejected ${(err as Error).constructor.name}`))
      }, 'commit')
    }
    const refused = runner.driver.capabilities.txSync ? `threw ${InvalidArgumentError.name}` : `rejected ${InvalidArgumentError.name}`
    expect(outcomes).toEqual([refused, refused, refused])
    expect((await runner.list()).jobs).toEqual([])
  })
})
