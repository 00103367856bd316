import { describe, expectTypeOf, it } from 'vitest'
import { z } from 'zod'
import type Database from 'better-sqlite3'
import { Runner, type Kind } from 'jobtable'
import { sqlite, type SqliteDriver } from 'jobtable/sqlite'

// Type-level tests: `npm test` runs tsc over this file before vitest, so an
// expected type error that stops being one fails the run.
function typedRunner(): Runner<SqliteDriver> {
  return new Runner({ driver: sqlite({ path: ':memory:' }) })
}

describe('types', () => {
  it('a kind handle enqueues only its payload type', () => {
    const runner = typedRunner()
    const plan = runner.register('meal_plan', {
      payload: z.strictObject({ household: z.string(), days: z.number() }),
      result: (r: { days: number }) => r,
      failures: ['provider_unavailable'],
      handler: async (payload, job) => {
        expectTypeOf(payload).toEqualTypeOf<{ household: string; days: number }>()
        await job.publish({ days: 1 })
        // @ts-expect-error a partial result has the kind's result type
        await job.publish({ nights: 1 })
        // @ts-expect-error only declared codes
        if (payload.days > 14) job.fail('too_many_days')
        if (payload.days > 7) job.fail('provider_unavailable')
        return { days: payload.days }
      },
    })
    expectTypeOf(plan).toEqualTypeOf<Kind<{ household: string; days: number }, SqliteDriver>>()
    void (async () => {
      await plan.enqueue({ household: 'h', days: 7 })
      // @ts-expect-error wrong field type
      await plan.enqueue({ household: 'h', days: '7' })
      // @ts-expect-error missing field
      await plan.enqueue({ household: 'h' })
      // @ts-expect-error another kind's payload
      await plan.enqueue({ url: 'https://example.com' })
    })
    // On SQLite a transactional enqueue is synchronous and takes a better-sqlite3 Database.
    expectTypeOf(plan.enqueueTx).parameter(0).toEqualTypeOf<Database.Database>()
    expectTypeOf(plan.enqueueTx).returns.toEqualTypeOf<string>()
    void runner.close()
  })

  it('the payload type is the schema input, the handler sees its output', () => {
    const runner = typedRunner()
    const k = runner.register('count', {
      payload: z.strictObject({ n: z.string().transform(Number) }),
      handler: (payload) => {
        expectTypeOf(payload.n).toEqualTypeOf<number>()
      },
    })
    expectTypeOf(k.enqueue).parameter(0).toEqualTypeOf<{ n: string }>()
    void runner.close()
  })
})
