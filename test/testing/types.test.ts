import { describe, expectTypeOf, it } from 'vitest'
import { z } from 'zod'
import { defineKind, type Kind, type Runner } from 'jobtable'
import type { SqliteDatabase, SqliteDriver } from 'jobtable/sqlite'
import { createTestKit, type TestJob, type TestKit } from 'jobtable/testing'

// Type-level tests: `npm test` runs tsc over this file before vitest, so an
// expected type error that stops being one fails the run.
const plan = defineKind('meal_plan', { payload: z.strictObject({ household: z.string(), days: z.number(), tags: z.array(z.string()) }) })
type PlanIn = { household: string; days: number; tags: string[] }

describe('testing: types', () => {
  it('kit.kinds is what register returns; without register it is undefined', async () => {
    const kit = await createTestKit({ register: (runner) => ({ plans: runner.register(plan, () => undefined) }) })
    expectTypeOf(kit).toEqualTypeOf<TestKit<{ plans: Kind<PlanIn, SqliteDriver> }>>()
    expectTypeOf(kit.runner).toEqualTypeOf<Runner<SqliteDriver>>()
    // A transactional enqueue takes the kit's database.
    expectTypeOf(kit.kinds.plans.enqueueTx).parameter(0).toEqualTypeOf<SqliteDatabase>()
    expectTypeOf(kit.database).toEqualTypeOf<SqliteDatabase>()
    const bare = await createTestKit()
    expectTypeOf(bare.kinds).toEqualTypeOf<undefined>()
    const asynchronous = await createTestKit({ register: async (runner) => runner.register(plan, () => undefined) })
    expectTypeOf(asynchronous.kinds).toEqualTypeOf<Kind<PlanIn, SqliteDriver>>()
    await Promise.all([kit.close(), bare.close(), asynchronous.close()])
  })

  it('a partial payload is typed by the handle or definition; a kind named by a string takes any', async () => {
    const kit = await createTestKit({ register: (runner) => runner.register(plan, () => undefined) })
    await kit.kinds.enqueue({ household: 'h', days: 7, tags: [] })
    kit.enqueued(kit.kinds, { days: 7 })
    kit.enqueued(plan, { tags: ['a'] })
    kit.assertNotEnqueued(plan, { household: 'h2', tags: [] })
    // @ts-expect-error a field the payload does not have
    kit.enqueued(kit.kinds, { nights: 7 })
    // @ts-expect-error a field of another type
    kit.enqueued(plan, { days: '7' })
    // @ts-expect-error an array element of another type
    kit.assertNotEnqueued(plan, { tags: [1] })
    kit.enqueued('meal_plan', { nights: 7 })
    expectTypeOf(kit.assertEnqueued('meal_plan')).toEqualTypeOf<TestJob>()
    expectTypeOf(await kit.drain()).toEqualTypeOf<TestJob[]>()
    // @ts-expect-error an unknown drain option
    void kit.drain({ maxjobs: 1 }).catch(() => undefined)
    await kit.close()
  })
})
