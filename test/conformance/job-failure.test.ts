import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'
import { expect, it } from 'vitest'
import { CODE_INTERNAL, JobFailure } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'

/**
 * A second copy of jobtable's errors module, as a globally installed
 * `jobtable` command gets when it loads a project's kinds module that
 * imports the project's own jobtable: the same source under another URL
 * is another module instance, with its own JobFailure class.
 */
const copy = (await import(pathToFileURL(resolve('src/errors.ts')).href + '?copy=2')) as { JobFailure: typeof JobFailure }
const OtherJobFailure = copy.JobFailure

it('the second copy really is another class, not linked by prototype to the first', () => {
  expect(OtherJobFailure).not.toBe(JobFailure)
  const other = new OtherJobFailure<'no_recipe_found'>('no_recipe_found')
  expect(Object.getPrototypeOf(other)).not.toBe(JobFailure.prototype)
  expect(JobFailure.prototype.isPrototypeOf(other)).toBe(false)
  // ...and yet each copy's instanceof accepts the other's failures.
  expect(other instanceof JobFailure).toBe(true)
  expect(new JobFailure<'x'>('x') instanceof OtherJobFailure).toBe(true)
})

it('a subclass keeps its own prototype instanceof; an unbranded look-alike is no JobFailure', () => {
  class ProviderDown extends JobFailure<'provider_unavailable'> {
    constructor() {
      super('provider_unavailable')
    }
  }
  expect(new ProviderDown() instanceof ProviderDown).toBe(true)
  expect(new ProviderDown() instanceof JobFailure).toBe(true)
  expect(new ProviderDown() instanceof OtherJobFailure).toBe(true)
  expect(new JobFailure<'provider_unavailable'>('provider_unavailable') instanceof ProviderDown).toBe(false)
  expect(new OtherJobFailure<'provider_unavailable'>('provider_unavailable') instanceof ProviderDown).toBe(false)
  expect({ code: 'x', name: 'JobFailure', message: 'jobtable: failure x' } instanceof JobFailure).toBe(false)
  expect(Object.assign(new Error('jobtable: failure x'), { code: 'x', name: 'JobFailure' }) instanceof JobFailure).toBe(false)
  expect(Object.create(Error.prototype) instanceof JobFailure).toBe(false)
  expect((null as unknown) instanceof JobFailure).toBe(false)
  // The brand is on the prototype, not enumerable: a failure's JSON and keys are as before.
  expect(JSON.stringify(new JobFailure<'x'>('x'))).toBe('{"code":"x","name":"JobFailure"}')
  expect(Object.keys(new OtherJobFailure<'x'>('x'))).toEqual(['code', 'name'])
})

describeEachBackend('a JobFailure from another copy of jobtable', (backend) => {
  const h = harness(backend)

  it('fails the job with its declared code; an undeclared code is still internal_error', async () => {
    const runner = h.runner()
    const declared = runner.register('import_recipe', {
      payload: echoPayload,
      failures: ['no_recipe_found'],
      handler: () => {
        throw new OtherJobFailure<'no_recipe_found'>('no_recipe_found')
      },
    })
    class OtherSubclass extends OtherJobFailure<'no_recipe_found'> {
      constructor() {
        super('no_recipe_found')
      }
    }
    const subclass = runner.register('import_recipe_subclass', {
      payload: echoPayload,
      failures: ['no_recipe_found'],
      handler: () => {
        throw new OtherSubclass()
      },
    })
    const undeclared = runner.register('import_recipe_undeclared', {
      payload: echoPayload,
      failures: ['no_recipe_found'],
      handler: () => {
        throw new OtherJobFailure<'not_declared'>('not_declared')
      },
    })
    const done = track(runner)
    await runner.start()
    const ids = [await declared.enqueue({ n: 1 }), await subclass.enqueue({ n: 2 }), await undeclared.enqueue({ n: 3 })]
    await done.ends(ids)
    const jobs = await Promise.all(ids.map((id) => runner.get(id)))
    expect(jobs.map((j) => [j.kind, j.status, j.error])).toEqual([
      ['import_recipe', 'failed', 'no_recipe_found'],
      ['import_recipe_subclass', 'failed', 'no_recipe_found'],
      ['import_recipe_undeclared', 'failed', CODE_INTERNAL],
    ])
  })

  it('fails a thrown object or Error that has a declared code but no brand as internal_error', async () => {
    const runner = h.runner()
    const lookAlikes: Record<string, () => unknown> = {
      plain_object: () => ({ code: 'no_recipe_found', name: 'JobFailure', message: 'jobtable: failure no_recipe_found' }),
      error_with_code: () => Object.assign(new Error('jobtable: failure no_recipe_found'), { code: 'no_recipe_found', name: 'JobFailure' }),
      error_prototype: () => Object.assign(Object.create(Error.prototype) as object, { code: 'no_recipe_found' }),
      wrong_brand_value: () => ({ [Symbol.for('jobtable.JobFailure')]: 'yes', code: 'no_recipe_found' }),
    }
    const kinds = Object.entries(lookAlikes).map(([name, make]) =>
      runner.register(name, {
        payload: echoPayload,
        failures: ['no_recipe_found'],
        handler: () => {
          throw make()
        },
      }),
    )
    const done = track(runner)
    await runner.start()
    const ids: string[] = []
    for (const kind of kinds) ids.push(await kind.enqueue({ n: 1 }))
    await done.ends(ids)
    for (const id of ids) {
      const job = await runner.get(id)
      expect([job.kind, job.status, job.error]).toEqual([job.kind, 'failed', CODE_INTERNAL])
    }
  })
})
