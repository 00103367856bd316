import { ResultNotPublicError } from './errors.js'

/**
 * Turns a handler's result into the public JSON text that is stored and
 * returned, through the kind's projection. Nothing else of the result is
 * ever encoded. The projection must yield exactly one JSON value: plain
 * objects, arrays, strings (without NUL or a lone surrogate), finite
 * numbers, booleans and null. A Map, a
 * Date, undefined, NaN or a cycle would be silently changed by
 * JSON.stringify, so they are refused instead. The projection's own error
 * is swallowed: it may quote the private data it was keeping out.
 */
export function publicJson<R>(project: ((result: R) => unknown) | undefined, result: R): string {
  if (project === undefined) return 'null'
  let value: unknown
  try {
    value = project(result)
  } catch {
    throw new ResultNotPublicError()
  }
  if (!isJsonValue(value, 0)) throw new ResultNotPublicError()
  return JSON.stringify(value)
}

const MAX_DEPTH = 256

function isJsonValue(v: unknown, depth: number): boolean {
  if (depth > MAX_DEPTH) return false // deep enough to be a cycle, or to overflow a parser
  if (v === null || typeof v === 'boolean') return true
  if (typeof v === 'string') return isStorableText(v)
  if (typeof v === 'number') return Number.isFinite(v)
  if (Array.isArray(v)) return v.every((item) => isJsonValue(item, depth + 1))
  if (typeof v !== 'object') return false
  const proto = Object.getPrototypeOf(v) as unknown
  if (proto !== Object.prototype && proto !== null) return false
  return Object.entries(v).every(([key, item]) => isStorableText(key) && isJsonValue(item, depth + 1))
}

/**
 * Text every backend stores as it is: no NUL (PostgreSQL's jsonb refuses
 * `\u0000`) and no lone surrogate (not Unicode text; jsonb refuses it
 * too), so a result is refused alike on SQLite and PostgreSQL, at once
 * rather than by a final write that can never succeed.
 */
function isStorableText(s: string): boolean {
  return !s.includes('\u0000') && !LONE_SURROGATE.test(s)
}

/** A high surrogate not followed by a low one, or a low one not preceded by a high one (String.isWellFormed is in no lib this project targets). */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/
