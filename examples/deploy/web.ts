/**
 * The web process's side: it imports the kind definitions, never the
 * handlers, and never starts a worker. It enqueues a meal plan, prints its
 * id and state, and exits; a worker (worker.ts) on the same database runs it.
 *
 *   npx tsx --conditions=source examples/deploy/web.ts
 */
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { mealPlan } from './kinds.js'

const runner = new Runner({ driver: sqlite({ path: process.env['JOBTABLE_DATABASE'] ?? './jobtable.db' }) })
const plans = runner.register(mealPlan) // a definition without a handler: enqueue, read, list
const id = await plans.enqueue({ household: 'h1', days: 3 })
// A kind known only at run time (a request body) is validated against the same definition.
await runner.enqueue('meal_plan', { household: 'h2', days: 2 })
const job = await runner.get(id)
console.log(`enqueued ${job.kind} ${id}: ${job.status}`)
await runner.close()
