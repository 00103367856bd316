/**
 * A worker process: the handlers for the shared kinds, on the database in
 * JOBTABLE_DATABASE (default ./jobtable.db). It stays up while idle, runs
 * what any process enqueues, and on SIGTERM stops within 10 s: jobs still
 * running then fail as interrupted at the next start.
 *
 *   npx tsx --conditions=source examples/deploy/worker.ts
 */
import { Runner } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'
import { importRecipe, mealPlan, type MealPlan } from './kinds.js'

const runner = new Runner({ driver: sqlite({ path: process.env['JOBTABLE_DATABASE'] ?? './jobtable.db' }), workers: 4 })

runner.register(mealPlan, async ({ days }, job) => {
  const dinners = ['lentil soup', 'risotto', 'tacos', 'curry', 'pasta', 'stir fry', 'pizza']
  const plan: MealPlan = { days: [], providerCostCents: 0 }
  for (let day = 1; day <= days; day++) {
    if (job.signal.aborted) throw new Error('stopping') // fails as interrupted at the next start
    await new Promise((resolve) => setTimeout(resolve, 20)) // the model provider thinking
    plan.days.push({ day, dinner: dinners[(day - 1) % dinners.length]! })
    plan.providerCostCents += 3
    await job.publish(plan)
  }
  return plan
})

runner.register(importRecipe, async ({ url }, job) => {
  if (new URL(url).pathname === '/') return job.fail('no_recipe_found')
  return { title: 'Soup' }
})

process.once('SIGTERM', () => void runner.stop({ timeoutMs: 10_000 }))
await runner.start()
console.log('worker ready')
// Resolves once stopped; rejects (exiting non-zero) if claiming failed for good.
await runner.wait()
await runner.close()
