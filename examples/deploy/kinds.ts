/**
 * The kinds of a small household app, defined once and imported by both
 * its web process (web.ts, which only enqueues) and its workers
 * (worker.ts, which attach the handlers). Nothing here runs a job.
 */
import { z } from 'zod'
import { defineKind } from 'jobtable'

/** What a meal-plan handler returns; only `days` is public. */
export interface MealPlan {
  days: { day: number; dinner: string }[]
  /** What the model provider charged: private, never stored. */
  providerCostCents: number
}

export const mealPlan = defineKind('meal_plan', {
  payload: z.strictObject({ household: z.string().min(1), days: z.number().int().min(1).max(14) }),
  // The projection's parameter type is the handler's return type.
  result: (plan: MealPlan) => ({ days: plan.days }),
  failures: ['provider_unavailable'],
  enqueueOverHttp: true,
})

export const importRecipe = defineKind('import_recipe', {
  payload: z.strictObject({ url: z.url() }),
  result: (recipe: { title: string }) => recipe,
  failures: ['no_recipe_found'],
  enqueueOverHttp: true,
})
