/**
 * A small household app's background work on an embedded SQLite file:
 * a meal-plan job that publishes each day as a partial result, and a
 * recipe import that fails with a code it declared. Run it alone with
 * `npx tsx --conditions=source examples/meal-plan.ts`, or as the kinds of
 * the `jobtable serve` command with `npm start`, which also calls demo().
 */
import { z } from 'zod'
import { Runner, type Job } from 'jobtable'
import { sqlite } from 'jobtable/sqlite'

interface MealPlan {
  days: { day: number; dinner: string }[]
  /** What the model provider charged: private, never stored. */
  providerCostCents: number
}

export function registerKinds(runner: Runner) {
  const mealPlan = runner.register('meal_plan', {
    payload: z.strictObject({ household: z.string().min(1), days: z.number().int().min(1).max(14) }),
    // Only the days are public; the cost stays in this process.
    result: (plan: MealPlan) => ({ days: plan.days }),
    failures: ['provider_unavailable'],
    // The household's browser asks for its meal plan over HTTP.
    enqueueOverHttp: true,
    handler: async ({ days }, job) => {
      const dinners = ['lentil soup', 'risotto', 'tacos', 'curry', 'pasta', 'stir fry', 'pizza']
      const plan: MealPlan = { days: [], providerCostCents: 0 }
      for (let day = 1; day <= days; day++) {
        if (job.signal.aborted) throw new Error('stopped')
        await new Promise((resolve) => setTimeout(resolve, 300)) // the model provider thinking
        plan.days.push({ day, dinner: dinners[(day - 1) % dinners.length]! })
        plan.providerCostCents += 3
        await job.publish(plan)
      }
      return plan
    },
  })

  const importRecipe = runner.register('import_recipe', {
    payload: z.strictObject({ url: z.url() }),
    result: (recipe: { title: string }) => recipe,
    failures: ['no_recipe_found'],
    enqueueOverHttp: true,
    handler: async ({ url }, job) => {
      // A real import would fetch the page; this one finds nothing there.
      if (new URL(url).pathname === '/') return job.fail('no_recipe_found')
      return { title: 'Soup' }
    },
  })
  return { mealPlan, importRecipe }
}

/**
 * Enqueues a meal plan and a recipe import that fails, and prints what
 * get() shows each time either changes, until both have finished.
 */
async function watch(runner: Runner, enqueue: () => Promise<[string, string]>, where: string): Promise<void> {
  const [planId, importId] = await enqueue()
  console.log(`enqueued meal_plan ${planId} and import_recipe ${importId} ${where}`)
  const show = (job: Job) => console.log(`${job.kind.padEnd(13)} ${job.status.padEnd(9)} result=${JSON.stringify(job.result)} error=${job.error}`)
  let last = ''
  for (;;) {
    const [plan, imported] = [await runner.get(planId), await runner.get(importId)]
    const line = JSON.stringify([plan, imported])
    if (line !== last) {
      show(plan)
      show(imported)
      last = line
    }
    if (plan.status !== 'queued' && plan.status !== 'running' && imported.status !== 'queued' && imported.status !== 'running') break
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/**
 * What `npm start` (`jobtable serve --kinds examples/meal-plan.ts --demo`)
 * runs once the API is up: the same two jobs as main(), then a hint of the
 * dashboard and the curl commands that reach the API, then a new example
 * job every few seconds (a meal plan of a few days, a recipe import that
 * succeeds or fails, now and then one scheduled for a little later), so
 * the dashboard has jobs moving, until the server stops (`signal`).
 */
export async function demo(runner: Runner, { url, signal }: { url: string; signal?: AbortSignal }): Promise<void> {
  await watch(
    runner,
    async () => [
      await runner.enqueue('meal_plan', { household: 'h1', days: 3 }),
      await runner.enqueue('import_recipe', { url: 'https://recipes.example/' }),
    ],
    'through the runner',
  )
  console.log(`\nThe dashboard is at ${url}/ and the API at ${url}/api/v1/jobs. Try:
  curl -s ${url}/api/v1/jobs
  curl -s -X POST ${url}/api/v1/jobs -H 'content-type: application/json' -d '{"kind":"meal_plan","payload":{"household":"h1","days":5}}'
A new example job is enqueued every ${DEMO_EVERY_MS / 1000} s. Press Ctrl-C to stop.`)
  const examples: [string, unknown, { delayMs?: number }?][] = [
    ['meal_plan', { household: 'h2', days: 5 }],
    ['import_recipe', { url: 'https://recipes.example/soup' }],
    ['meal_plan', { household: 'h3', days: 7 }],
    ['import_recipe', { url: 'https://recipes.example/' }],
    ['meal_plan', { household: 'h1', days: 4 }, { delayMs: 10_000 }],
  ]
  for (let n = 0; !signal?.aborted; n++) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, DEMO_EVERY_MS)
      signal?.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true })
    })
    if (signal?.aborted) break
    const [kind, payload, options] = examples[n % examples.length]!
    await runner.enqueue(kind, payload, options)
  }
}

/** How often the demo enqueues another example job. */
const DEMO_EVERY_MS = 3_000

async function main(): Promise<void> {
  const path = process.env.JOBTABLE_DB ?? 'jobtable-example.db'
  const runner = new Runner({ driver: sqlite({ path }), workers: 4 })
  const { mealPlan, importRecipe } = registerKinds(runner)
  await runner.start()
  // close() in a finally rather than `await using`, which Node 20 cannot run as tsc --init compiles it.
  try {
    await watch(
      runner,
      async () => [await mealPlan.enqueue({ household: 'h1', days: 3 }), await importRecipe.enqueue({ url: 'https://recipes.example/' })],
      `in ${path}`,
    )
  } finally {
    await runner.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) await main()
