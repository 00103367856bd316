import { InvalidArgumentError } from '../errors.js'
import type { JsonValue } from '../job.js'

/**
 * A part of a payload to look for: every field given must be there with
 * that value; fields left out may hold anything. Objects match by the
 * fields given, at every depth; arrays match element by element, with
 * the same length; other values match when equal. A Date stands for the
 * ISO string a payload stores for it (so one is allowed where a string is).
 */
export type PayloadMatch<T> = T extends Date
  ? Date | string
  : T extends string
    ? T | Date
    : T extends readonly (infer U)[]
      ? readonly PayloadMatch<U>[]
      : T extends object
        ? { readonly [K in keyof T]?: PayloadMatch<T[K]> }
        : T

/**
 * The partial as the JSON a payload is stored as (a Date becomes its ISO
 * string, an undefined field is dropped), so it is compared with the
 * payload as the handler receives it. Throws for a value JSON cannot hold.
 */
export function jsonOf(partial: unknown, where: string): JsonValue {
  let text: string | undefined
  try {
    text = JSON.stringify(partial)
  } catch {
    text = undefined
  }
  if (text === undefined) throw new InvalidArgumentError(`${where}: the payload to match must be JSON (plain objects, arrays, strings, numbers, booleans, null)`)
  return JSON.parse(text) as JsonValue
}

/** Whether `actual` holds every field of `expected`, at every depth (see PayloadMatch). */
export function matches(actual: JsonValue, expected: JsonValue): boolean {
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && actual.length === expected.length && expected.every((e, i) => matches(actual[i]!, e))
  }
  if (expected !== null && typeof expected === 'object') {
    if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false
    return Object.entries(expected).every(([key, e]) => Object.hasOwn(actual, key) && matches(actual[key]!, e))
  }
  return Object.is(actual, expected)
}
