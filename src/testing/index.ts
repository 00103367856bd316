/**
 * jobtable/testing: a test kit for the handlers of an application's
 * kinds. A Runner on a real database, with the production driver (its
 * own SQLite database in memory or in a temporary file, needing
 * better-sqlite3; or a driver the test hands in, such as PostgreSQL's),
 * whose jobs run only when the test drains the queue, on a clock the test
 * moves. Neither better-sqlite3 nor pg is loaded until a kit needs it.
 *
 * ```ts
 * import { createTestKit } from 'jobtable/testing'
 *
 * await using kit = await createTestKit({ register: registerKinds })
 * const id = await kit.kinds.mealPlan.enqueue({ household: 'h1', days: 2 })
 * await kit.assertEnqueued('meal_plan', { days: 2 })
 * await kit.drain()
 * expect(await kit.job(id)).toMatchObject({ status: 'succeeded' })
 * ```
 */
export { createTestKit } from './kit.js'
export type { TestKit, TestKitOptions, TestKitRunnerOptions, TestKitDatabase, DrainOptions, TestJob, JobsFilter, EnqueuedOptions, AssertEnqueuedOptions, KindRef, PayloadOf } from './kit.js'
export { TestClock, createTestClock } from './clock.js'
export { DrainLimitError, DrainTimeoutError, type RunningJob } from './errors.js'
export type { PayloadMatch } from './match.js'
