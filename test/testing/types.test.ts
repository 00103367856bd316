import { describe, expectTypeOf, it } from 'vitest'
import { z } from 'zod'
import { defineKind, type Kind, type Runner } from 'jobtable'
import type { PostgresDriver } from 'jobtable/postgres'
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
    await kit.enqueued(kit.kinds, { days: 7 })
    await kit.enqueued(plan, { tags: ['a'] })
    await kit.assertNotEnqueued(plan, { household: 'h2', tags: [] })
    // @ts-expect-error a field the payload does not have
    void kit.enqueued(kit.kinds, { nights: 7 })
    // @ts-expect-error a field of another type
    void kit.enqueued(plan, { days: '7' })
    // @ts-expect-error an array element of another type
    void kit.assertNotEnqueued(plan, { tags: [1] })
    await kit.enqueued('meal_plan', { nights: 7 })
    // The reads are read through the runner: promises, on every driver.
    expectTypeOf<ReturnType<typeof kit.assertEnqueued<'meal_plan'>>>().toEqualTypeOf<Promise<TestJob>>()
    expectTypeOf<ReturnType<typeof kit.assertNotEnqueued<'meal_plan'>>>().toEqualTypeOf<Promise<void>>()
    expectTypeOf<ReturnType<typeof kit.enqueued<'meal_plan'>>>().toEqualTypeOf<Promise<TestJob[]>>()
    expectTypeOf<ReturnType<typeof kit.job>>().toEqualTypeOf<Promise<TestJob>>()
    expectTypeOf<ReturnType<typeof kit.jobs>>().toEqualTypeOf<Promise<TestJob[]>>()
    expectTypeOf(await kit.drain()).toEqualTypeOf<TestJob[]>()
    // @ts-expect-error an unknown drain option
    void kit.drain({ maxjobs: 1 }).catch(() => undefined)
    await kit.close()
  })

  it('with a driver, the runner, the handles and the database follow its type', () => {
    // Never called: tsc checks the types a PostgreSQL kit gets.
    async function onPostgres(driver: PostgresDriver) {
      const kit = await createTestKit({
        driver,
        register: (runner) => {
          expectTypeOf(runner).toEqualTypeOf<Runner<PostgresDriver>>()
          return runner.register(plan, () => undefined)
        },
      })
      expectTypeOf(kit).toEqualTypeOf<TestKit<Kind<PlanIn, PostgresDriver>, PostgresDriver>>()
      expectTypeOf(kit.database).toEqualTypeOf<null>()
      // On PostgreSQL, a transactional enqueue takes a client of the application's own pool.
      expectTypeOf(kit.kinds.enqueueTx).parameter(0).not.toEqualTypeOf<SqliteDatabase>()
    }
    async function onSqlite(driver: SqliteDriver) {
      const kit = await createTestKit({ driver })
      expectTypeOf(kit.database).toEqualTypeOf<SqliteDatabase>()
    }
    void [onPostgres, onSqlite]
  })
})
