/**
 * Tests of the example app's kinds (examples/meal-plan.ts) as the app's
 * own developers would write them with jobtable/testing: the same
 * registerKinds the app runs, on a real SQLite database in memory, with
 * jobs run only when the test drains the queue.
 */
import { describe, expect, it } from 'vitest'
import { InvalidPayloadError } from 'jobtable'
import { createTestKit } from 'jobtable/testing'
import { registerKinds } from '../meal-plan.js'

describe('meal-plan kinds', () => {
  it('a meal plan runs to success with one dinner a day, and its result holds only the public days', async () => {
    await using kit = await createTestKit({ register: registerKinds })
    const id = await kit.kinds.mealPlan.enqueue({ household: 'h1', days: 3 })
    // Nothing runs before the test drains: the job waits, queued.
    expect((await kit.job(id)).status).toBe('queued')

    const ran = await kit.drain()

    expect(ran.map((job) => job.id)).toEqual([id])
    expect(await kit.job(id)).toMatchObject({
      status: 'succeeded',
      error: null,
      attempt: 1,
      result: {
        days: [
          { day: 1, dinner: 'lentil soup' },
          { day: 2, dinner: 'risotto' },
          { day: 3, dinner: 'tacos' },
        ],
      },
    })
    // The provider's cost is private: the projection keeps it out of what is stored.
    expect(JSON.stringify(await kit.job(id))).not.toContain('providerCost')
  })

  it('a recipe import of a page with no recipe fails with its declared code; a page with one succeeds', async () => {
    await using kit = await createTestKit({ register: registerKinds })
    const none = await kit.kinds.importRecipe.enqueue({ url: 'https://recipes.example/' })
    const soup = await kit.kinds.importRecipe.enqueue({ url: 'https://recipes.example/soup' })

    const ran = await kit.drain()

    expect(ran.map((job) => [job.id, job.status, job.error, job.result])).toEqual([
      [none, 'failed', 'no_recipe_found', null],
      [soup, 'succeeded', null, { title: 'Soup' }],
    ])
  })

  it('a job enqueued by name, as the HTTP API enqueues it, is found by kind and part of its payload', async () => {
    await using kit = await createTestKit({ register: registerKinds })
    await kit.runner.enqueue('meal_plan', { household: 'h2', days: 5 }, { scope: 'h2' })

    const job = await kit.assertEnqueued(kit.kinds.mealPlan, { household: 'h2' }, { scope: 'h2' })
    expect(job).toMatchObject({ status: 'queued', payload: { household: 'h2', days: 5 } })
    await kit.assertNotEnqueued('meal_plan', { household: 'h1' })
    await kit.assertNotEnqueued('import_recipe')
    // Typed by the handle: a field the payload does not have does not compile.
    // @ts-expect-error `nights` is no field of a meal plan's payload
    expect(await kit.enqueued(kit.kinds.mealPlan, { nights: 5 })).toEqual([])
  })

  it('a payload its schema refuses is not enqueued at all', async () => {
    await using kit = await createTestKit({ register: registerKinds })
    await expect(kit.kinds.mealPlan.enqueue({ household: 'h1', days: 15 })).rejects.toBeInstanceOf(InvalidPayloadError)
    expect(await kit.jobs()).toEqual([])
    expect(await kit.drain()).toEqual([])
  })
})
