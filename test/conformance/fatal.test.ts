import { expect, it } from 'vitest'
import { DatabaseError, RunnerStateError } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { FaultyDriver } from '../support/faults.js'
import { echoPayload, harness } from '../support/harness.js'
import { captureLogs } from '../support/logs.js'

describeEachBackend('fatal errors are loud', (backend) => {
  const h = harness(backend)

  /** A permanent claim error, remembered so the test can tell it is the very one reported. */
  function permanentClaimError() {
    const made: DatabaseError[] = []
    const make = () => {
      const err = new DatabaseError('claim jobs', 'SQLITE_CORRUPT', false)
      made.push(err)
      return err
    }
    return { made, make }
  }

  it('a claim failing with a permanent error calls onFatal once with it, logs one error line, rejects wait() with it, and leaves the runner stopped', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const claimError = permanentClaimError()
    faulty.failUntilCleared('jobClaim', claimError.make)
    const logs = captureLogs()
    const fatal: unknown[] = []
    const runner = h.runner({ driver: faulty.driver, logger: logs, onFatal: (err) => void fatal.push(err) })
    runner.register('echo', { payload: echoPayload, handler: () => undefined })
    await runner.start()

    const waited: unknown = await runner.wait().then(
      () => new Error('wait() resolved'),
      (err: unknown) => err,
    )
    expect(claimError.made).toHaveLength(1)
    const [thrown] = claimError.made
    expect(waited).toBe(thrown)
    expect(fatal).toEqual([thrown])
    expect(fatal[0]).toBe(thrown)
    const errors = logs.lines.filter((l) => l.level === 'error')
    expect(errors).toEqual([
      { level: 'error', fields: { error: 'SQLITE_CORRUPT' }, message: 'claim jobs failed with an error that cannot succeed; the runner stops' },
    ])
    // Stopped: a later stop() resolves, wait() keeps reporting the same error, nothing starts again.
    await runner.stop()
    await expect(runner.wait()).rejects.toBe(thrown)
    await expect(runner.start()).rejects.toBeInstanceOf(RunnerStateError)
    expect(faulty.calls['jobClaim']).toBe(1)
    expect(fatal).toHaveLength(1)
  })

  it('an onFatal callback that throws does not keep the runner from stopping', async () => {
    const faulty = new FaultyDriver(h.store.driver())
    const claimError = permanentClaimError()
    faulty.failUntilCleared('jobClaim', claimError.make)
    const logs = captureLogs()
    let calls = 0
    const runner = h.runner({
      driver: faulty.driver,
      logger: logs,
      onFatal: () => {
        calls++
        throw new Error('the application callback failed')
      },
    })
    runner.register('echo', { payload: echoPayload, handler: () => undefined })
    await runner.start()

    await expect(runner.wait()).rejects.toBe(claimError.made[0])
    expect(calls).toBe(1)
    await runner.stop()
    expect(logs.lines.filter((l) => l.level === 'error')).toHaveLength(1)
    // The callback's own error is not logged: only the database's code is.
    expect(logs.text()).not.toContain('the application callback failed')
  })
})
