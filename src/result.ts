import { ResultNotPublicError } from './errors.js'

/**
 * Turns a handler's result into the public JSON text that is stored and
 * returned, through the kind's projection. Nothing else of the result is
 * ever encoded. The projection must yield exactly one JSON value: plain
 * objects, arrays, strings, finite numbers, booleans and null. A Map, a
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
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return true
  if (typeof v === 'number') return Number.isFinite(v)
  if (Array.isArray(v)) return v.every((item) => isJsonValue(item, depth + 1))
  if (typeof v !== 'object') return false
  const proto = Object.getPrototypeOf(v) as unknown
  if (proto !== Object.prototype && proto !== null) return false
  return Object.values(v).every((item) => isJsonValue(item, depth + 1))
}
