import { describe, expectTypeOf, it } from 'vitest'
import { z } from 'zod'
import type Database from 'better-sqlite3'
import { defineKind, JobFailure, JobRateLimited, Runner, type Activity, type Cooldown, type JobSpec, type Kind, type KindDef, type RateLimitState, type UniqueEnqueue } from 'jobtable'
import type { PgQueryable, PostgresDriver } from 'jobtable/postgres'
import { sqlite, type SqliteDatabase, type SqliteDriver } from 'jobtable/sqlite'

// Type-level tests: `npm test` runs tsc over this file before vitest, so an
// expected type error that stops being one fails the run.
function typedRunner(): Runner<SqliteDriver> {
  return new Runner({ driver: sqlite({ path: ':memory:' }) })
}

describe('types', () => {
  it("a schedule's payload has its kind's payload type, whether the kind is a handle or a definition", () => {
    const runner = typedRunner()
    const digestDef = defineKind('digest', { payload: z.strictObject({ list: z.string() }) })
    const digest = runner.register(digestDef)
    runner.schedule('a', digest, { cron: '0 * * * *', payload: { list: 'news' } })
    runner.schedule('b', digestDef, { cron: '0 * * * *', payload: (tick) => ({ list: tick.toISOString() }) })
    // Never called: these would throw at run time, as they must not compile.
    const refused = () => {
      // @ts-expect-error wrong field type, by the handle
      runner.schedule('c', digest, { cron: '0 * * * *', payload: { list: 7 } })
      // @ts-expect-error wrong field type, by the definition
      runner.schedule('d', digestDef, { cron: '0 * * * *', payload: () => ({ lists: 'news' }) })
      // @ts-expect-error runAt is the tick's, not an option
      runner.schedule('e', digest, { cron: '0 * * * *', payload: { list: 'news' }, options: { runAt: 5 } })
    }
    void refused
  })

  it('a schedule takes a definition with a typed result projection, its payload still typed by the definition', () => {
    type MealPlan = { days: string[]; providerCost: number }
    const payload = z.strictObject({ household: z.string(), days: z.number() })
    const mealPlan = defineKind('meal_plan', { payload, result: (plan: MealPlan) => ({ days: plan.days.length }), failures: ['provider_unavailable'] })
    const runner = typedRunner()
    runner.register(mealPlan)
    runner.schedule('weekly-plan', mealPlan, { cron: '0 6 * * 1', payload: { household: 'h1', days: 7 } })
    runner.schedule('weekly-plan-2', mealPlan, { cron: '0 6 * * 1', payload: (tick) => ({ household: tick.toISOString(), days: 7 }) })
    const refused = () => {
      // @ts-expect-error wrong field type, by a definition with a result projection
      runner.schedule('weekly-plan-3', mealPlan, { cron: '0 6 * * 1', payload: { household: 'h1', days: '7' } })
    }
    void refused
    void runner.close()
  })

  it("retry.codes are checked against the declared failures and never widen them: a typo does not compile, and fail takes only declared codes", () => {
    const payload = z.strictObject({ url: z.string() })
    const refused = () => {
      // @ts-expect-error a typo in retry.codes, failures declared as const
      defineKind('import_recipe', { payload, failures: ['no_recipe'] as const, retry: { maxAttempts: 3, codes: ['no_recipie'] } })
      // @ts-expect-error a typo in retry.codes, failures inferred as literals
      defineKind('import_recipe', { payload, failures: ['no_recipe'], retry: { maxAttempts: 3, codes: ['no_recipie'] } })
      // @ts-expect-error no failures declared: only the runner's codes may be retried
      defineKind('import_recipe', { payload, retry: { maxAttempts: 3, codes: ['no_recipe'] } })
      const oneStep = typedRunner()
      // @ts-expect-error a typo in retry.codes of the one-step form
      oneStep.register('import_recipe', { payload, failures: ['no_recipe'], retry: { maxAttempts: 3, codes: ['no_recipie'] }, handler: () => undefined })
    }
    void refused
    const importRecipe = defineKind('import_recipe', {
      payload,
      failures: ['no_recipe'],
      retry: { maxAttempts: 3, codes: ['no_recipe', 'timeout', 'internal_error'] },
    })
    // The runner's codes are retried, not declared: the kind's codes stay its failures.
    expectTypeOf(importRecipe).toEqualTypeOf<KindDef<typeof payload, unknown, 'no_recipe'>>()
    expectTypeOf(defineKind('ping', { payload, retry: { maxAttempts: 2, codes: ['timeout'] } })).toEqualTypeOf<KindDef<typeof payload, unknown, never>>()
    const runner = typedRunner()
    runner.register(importRecipe, (p, job) => {
      // @ts-expect-error only the declared codes: not the typo
      if (p.url === 'a') job.fail('no_recipie')
      // @ts-expect-error only the declared codes: not a runner's code listed in retry.codes
      if (p.url === 'b') job.fail('timeout')
      // @ts-expect-error nor by the definition's failure()
      if (p.url === 'c') throw importRecipe.failure('internal_error')
      return job.fail('no_recipe')
    })
    void runner.close()
  })

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
    // On SQLite a transactional enqueue is synchronous and takes a better-sqlite3 Database (typed by shape).
    expectTypeOf(plan.enqueueTx).parameter(0).toEqualTypeOf<SqliteDatabase>()
    expectTypeOf<Database.Database>().toExtend<SqliteDatabase>()
    expectTypeOf(plan.enqueueTx).returns.toEqualTypeOf<string>()
    void runner.close()
  })

  it('a batch: kind.job takes only its payload type, runner.enqueueMany only specs; transactional batches are synchronous on SQLite only', () => {
    const runner = typedRunner()
    const plan = runner.register('meal_plan', { payload: z.strictObject({ household: z.string(), days: z.number() }), handler: () => undefined })
    const mail = runner.register('mail', { payload: z.strictObject({ to: z.string() }), handler: () => undefined })
    const specs = [plan.job({ household: 'h', days: 7 }, { priority: 2 }), mail.job({ to: 'a@example.com' }, { delayMs: 60_000 })]
    expectTypeOf(specs).toEqualTypeOf<JobSpec[]>()
    // @ts-expect-error wrong field type
    plan.job({ household: 'h', days: '7' })
    // @ts-expect-error another kind's payload
    plan.job({ to: 'a@example.com' })
    // @ts-expect-error an unknown option
    plan.job({ household: 'h', days: 7 }, { priorty: 1 })
    expectTypeOf(runner.enqueueMany).returns.toEqualTypeOf<Promise<UniqueEnqueue[]>>()
    // @ts-expect-error a payload is not a spec
    void (() => runner.enqueueMany([{ household: 'h', days: 7 }]))
    // @ts-expect-error nor is an object of a spec's visible shape
    void (() => runner.enqueueMany([{ kind: 'meal_plan' }]))
    expectTypeOf(runner.enqueueManyTx).parameter(0).toEqualTypeOf<SqliteDatabase>()
    expectTypeOf(runner.enqueueManyTx).returns.toEqualTypeOf<UniqueEnqueue[]>()
    expectTypeOf(plan.enqueueManyTx).returns.toEqualTypeOf<string[]>()
    // On PostgreSQL both take the pg client (by shape) and return promises.
    expectTypeOf<Runner<PostgresDriver>['enqueueManyTx']>().parameter(0).toEqualTypeOf<PgQueryable>()
    expectTypeOf<Runner<PostgresDriver>['enqueueManyTx']>().returns.toEqualTypeOf<Promise<UniqueEnqueue[]>>()
    expectTypeOf<Kind<{ n: number }, PostgresDriver>['enqueueManyTx']>().returns.toEqualTypeOf<Promise<string[]>>()
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

  it('a JobFailure with its codes as a type argument refuses a typo; without one any string compiles, as from JavaScript', () => {
    type Codes = 'no_recipe_found' | 'provider_unavailable'
    // The natural form compiles: the kind's declared codes are checked when the job fails, and
    // an undeclared one fails it with internal_error (test/conformance/job-failure.test.ts).
    const untyped = new JobFailure('typo')
    expectTypeOf(untyped).toEqualTypeOf<JobFailure<string>>()
    expectTypeOf(untyped.code).toEqualTypeOf<string>()
    if (untyped.code !== 'typo') throw new Error('the code is kept at run time')
    void ((code: string) => new JobFailure(code))
    new JobFailure<'no_recipe_found'>('no_recipe_found')
    // @ts-expect-error not the code named by the type argument
    new JobFailure<'no_recipe_found'>('no_recipe_fuond')
    const fail = (code: Codes): never => {
      throw new JobFailure<Codes>(code)
    }
    // @ts-expect-error not one of the codes
    void (() => new JobFailure<Codes>('typo'))
    const anyCode = (code: string) => new JobFailure<string>(code)
    expectTypeOf(anyCode('x')).toExtend<Error>()
    // A handler's typed forms, job.fail(code) and kind.failure(code), refuse a typo (above).
    // instanceof narrows to a JobFailure, and to a subclass for a subclass.
    class ProviderDown extends JobFailure<'provider_unavailable'> {
      readonly retryAfterS = 5
      constructor() {
        super('provider_unavailable')
      }
    }
    const thrown: unknown = new ProviderDown()
    if (thrown instanceof JobFailure) expectTypeOf(thrown.code).toEqualTypeOf<string>()
    if (thrown instanceof ProviderDown) expectTypeOf(thrown.retryAfterS).toEqualTypeOf<number>()
    void fail
  })

  it('types flow from one definition: the producer enqueues its input, the handler sees its output, result and codes are checked', () => {
    const plan = defineKind('meal_plan', {
      // servings has a default: optional to enqueue, always there for the handler.
      payload: z.strictObject({ household: z.string(), days: z.number().int().max(14), servings: z.number().int().default(2) }),
      result: (p: { days: number[] }) => ({ days: p.days.length }),
      failures: ['provider_unavailable'],
    })
    type Input = { household: string; days: number; servings?: number | undefined }
    type Output = { household: string; days: number; servings: number }

    // A producer: the definition alone.
    const web = typedRunner()
    const enqueuer = web.register(plan)
    expectTypeOf(enqueuer).toEqualTypeOf<Kind<Input, SqliteDriver>>()
    void (async () => {
      await enqueuer.enqueue({ household: 'h', days: 7 })
      await enqueuer.enqueue({ household: 'h', days: 7, servings: 4 })
      // @ts-expect-error wrong field type
      await enqueuer.enqueue({ household: 'h', days: '7' })
      // @ts-expect-error missing field
      await enqueuer.enqueue({ days: 7 })
      // @ts-expect-error unknown field
      await enqueuer.enqueue({ household: 'h', days: 7, nights: 7 })
    })

    // A worker: the same definition with its handler.
    const worker = typedRunner()
    const handled = worker.register(plan, async (payload, job) => {
      expectTypeOf(payload).toEqualTypeOf<Output>()
      await job.publish({ days: [1] })
      // @ts-expect-error a partial result has the projection's parameter type
      await job.publish({ nights: 1 })
      // @ts-expect-error only the declared codes
      if (payload.days > 13) job.fail('typo')
      if (payload.days > 12) job.fail('provider_unavailable')
      if (payload.days > 11) throw plan.failure('provider_unavailable')
      // @ts-expect-error only the declared codes
      if (payload.days > 10) throw plan.failure('typo')
      return { days: [1] }
    })
    expectTypeOf(handled).toEqualTypeOf<Kind<Input, SqliteDriver>>()
    expectTypeOf(plan.failure('provider_unavailable')).toEqualTypeOf<JobFailure<'provider_unavailable'>>()

    // The handler's result is the projection's parameter type.
    // (Not called: one registration per kind and runner.)
    const other = typedRunner()
    // @ts-expect-error a result of another shape
    void (() => other.register(plan, async () => ({ nights: 1 })))
    // @ts-expect-error a synchronous handler is held to it too
    void (() => other.register(plan, () => ({ days: 1 })))
    void (() => other.register(plan, () => ({ days: [1, 2] })))
    void web.close()
    void worker.close()
    void other.close()
  })

  it('rate limits and fairness are typed: a misspelled option, a wrong key or fairness mode does not compile', () => {
    const payload = z.strictObject({ household: z.string() })
    defineKind('plan', { payload, rateLimit: { limit: 60, periodMs: 60_000 }, fairness: 'scope' })
    defineKind('plan', { payload, rateLimit: { limit: 60, periodMs: 60_000, key: 'scope' } })
    defineKind('plan', { payload, rateLimit: { limit: 60, periodMs: 60_000, key: 'provider:openai' } })
    const refused = () => {
      // @ts-expect-error fairness across scopes is the only mode
      defineKind('plan', { payload, fairness: 'tenant' })
      // @ts-expect-error periodMs is required
      defineKind('plan', { payload, rateLimit: { limit: 60 } })
      // @ts-expect-error an unknown rateLimit option
      defineKind('plan', { payload, rateLimit: { limit: 60, periodMs: 60_000, per: 'scope' } })
      // @ts-expect-error a key is a string
      defineKind('plan', { payload, rateLimit: { limit: 60, periodMs: 60_000, key: 7 } })
      // @ts-expect-error a limit is a number
      defineKind('plan', { payload, rateLimit: { limit: '60', periodMs: 60_000 } })
      // @ts-expect-error and in the one-step form
      typedRunner().register('plan', { payload, fairness: 'household', handler: () => undefined })
    }
    void refused
    const runner = typedRunner()
    runner.register('plan', {
      payload,
      rateLimit: { limit: 60, periodMs: 60_000, key: 'scope' },
      handler: (_p, job) => {
        expectTypeOf(job.scope).toEqualTypeOf<string | null>()
        expectTypeOf(job.rateLimited).returns.toEqualTypeOf<never>()
        if (job.attempt > 3) job.rateLimited(new Date(), { key: 'provider:openai' })
        if (job.attempt > 2) job.rateLimited(30_000)
        // @ts-expect-error a time is a Date or a number
        if (job.attempt > 1) job.rateLimited('30s')
        // @ts-expect-error an unknown option
        if (job.attempt > 1) job.rateLimited(30_000, { scope: 'h1' })
        throw new JobRateLimited(Date.now() + 1_000)
      },
    })
    expectTypeOf(runner.cooldowns()).toEqualTypeOf<Promise<Cooldown[]>>()
    expectTypeOf(runner.clearCooldown('k')).toEqualTypeOf<Promise<boolean>>()
    expectTypeOf(runner.rateLimits()).toEqualTypeOf<Promise<RateLimitState[]>>()
    expectTypeOf(runner.activity({ minutes: 60, scope: null })).toEqualTypeOf<Promise<Activity>>()
    expectTypeOf<Activity['finished'][number]['status']>().toEqualTypeOf<'succeeded' | 'failed' | 'cancelled'>()
    // @ts-expect-error an unknown activity option
    void (() => runner.activity({ hours: 1 }))
    void runner.close()
  })
})
