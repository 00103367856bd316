/**
 * jobtable/testing: a test kit for the handlers of an application's
 * kinds. A Runner on a real SQLite database, with the production driver
 * (in memory, or a temporary file), whose jobs run only when the test
 * drains the queue, on a clock the test moves. Needs better-sqlite3, as
 * `jobtable/sqlite` does.
 *
 * ```ts
 * import { createTestKit } from 'jobtable/testing'
 *
 * await using kit = await createTestKit({ register: registerKinds })
 * const id = await kit.kinds.mealPlan.enqueue({ household: 'h1', days: 2 })
 * kit.assertEnqueued('meal_plan', { days: 2 })
 * await kit.drain()
 * expect(kit.job(id)).toMatchObject({ status: 'succeeded' })
 * ```
 */
export { createTestKit } from './kit.js'
export type { TestKit, TestKitOptions, TestKitRunnerOptions, DrainOptions, TestJob, JobsFilter, EnqueuedOptions, AssertEnqueuedOptions, KindRef, PayloadOf } from './kit.js'
export { TestClock, createTestClock } from './clock.js'
export { DrainLimitError, DrainTimeoutError, type RunningJob } from './errors.js'
export type { PayloadMatch } from './match.js'
