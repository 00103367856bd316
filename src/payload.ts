import type { StandardSchemaV1 } from '@standard-schema/spec'
import { InvalidPayloadError, type PayloadIssue } from './errors.js'

/**
 * Validation of payloads through a Standard Schema (zod, valibot, arktype
 * and others implement it), so users keep the validator they know.
 *
 * A payload is validated as the JSON it will be stored as, not as the
 * value handed in: the handler receives what a JSON round trip gives, so a
 * Date or an undefined field is judged as it will arrive. A field present
 * in the input but absent from the validated value is refused as unknown,
 * so a schema that strips unknown keys (zod's default) still refuses them,
 * as the reference design's DisallowUnknownFields does.
 */

/** Encodes and validates a payload, returning its JSON text; throws InvalidPayloadError. */
export function encodePayload(kind: string, schema: StandardSchemaV1, payload: unknown): string | Promise<string> {
  const { text, value } = toJson(kind, payload)
  const checked = schema['~standard'].validate(value)
  if (isThenable(checked)) return Promise.resolve(checked).then((r) => accept(kind, value, r, text))
  return accept(kind, value, checked, text)
}

/** As encodePayload, for a caller that cannot await (a synchronous transaction). */
export function encodePayloadSync(kind: string, schema: StandardSchemaV1, payload: unknown): string {
  const encoded = encodePayload(kind, schema, payload)
  if (typeof encoded !== 'string') {
    throw new InvalidPayloadError(kind, [
      { path: '', message: 'the schema validates asynchronously, which a synchronous transaction cannot wait for' },
    ])
  }
  return encoded
}

/**
 * Decodes a stored payload and validates it again; undefined when it no
 * longer fits. Synchronous when the schema validates synchronously (zod
 * and valibot do), so a claimed job starts without waiting a turn.
 */
export function decodePayload(
  schema: StandardSchemaV1,
  text: string,
): { value: unknown } | undefined | Promise<{ value: unknown } | undefined> {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  const checked = schema['~standard'].validate(value)
  if (isThenable(checked)) return Promise.resolve(checked).then((r) => fits(value, r), () => undefined)
  return fits(value, checked)
}

function fits(input: unknown, result: StandardSchemaV1.Result<unknown>): { value: unknown } | undefined {
  if (!isSuccess(result) || unknownField(input, result.value, []) !== undefined) return undefined
  return { value: result.value }
}

/**
 * Whether a value is a promise or any other thenable: a schema's result
 * may come from another realm (vm, some test environments), where
 * `instanceof Promise` is false.
 */
export function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (typeof v === 'object' || typeof v === 'function') && v !== null && typeof (v as { then?: unknown }).then === 'function'
}

/** A result that validated: no issues, and a value (a result with neither is a broken schema, not a pass). */
function isSuccess(result: unknown): result is StandardSchemaV1.SuccessResult<unknown> {
  return typeof result === 'object' && result !== null && !(result as { issues?: unknown }).issues && 'value' in result
}

function toJson(kind: string, payload: unknown): { text: string; value: unknown } {
  let text: string | undefined
  try {
    text = JSON.stringify(payload)
  } catch {
    text = undefined // a BigInt or a cycle: not JSON
  }
  if (text === undefined) throw new InvalidPayloadError(kind, [{ path: '', message: 'payload is not JSON' }])
  return { text, value: JSON.parse(text) as unknown }
}

function accept(kind: string, input: unknown, result: StandardSchemaV1.Result<unknown>, text: string): string {
  if (result?.issues) throw new InvalidPayloadError(kind, Array.from(result.issues).flatMap(toIssues))
  if (!isSuccess(result)) throw new InvalidPayloadError(kind, [{ path: '', message: 'the schema returned neither a value nor issues' }])
  const unknown = unknownField(input, result.value, [])
  if (unknown !== undefined) throw new InvalidPayloadError(kind, [{ path: unknown, message: 'unknown field' }])
  return text
}

function toIssues(issue: StandardSchemaV1.Issue): PayloadIssue[] {
  const path = (issue.path ?? []).map((p) => String(typeof p === 'object' ? p.key : p))
  // A strict object schema reports unknown keys at the object itself; zod lists them in `keys`,
  // so name each unknown field as the non-strict path would.
  const keys = (issue as { keys?: unknown }).keys
  if (Array.isArray(keys) && keys.length > 0 && keys.every((k) => typeof k === 'string')) {
    return keys.map((key: string) => ({ path: [...path, key].join('.'), message: 'unknown field' }))
  }
  return [{ path: path.join('.'), message: issueMessage(issue) }]
}

/** An `expected` safe to repeat: a type name or a bound, no quotes, no brackets beyond `<>`, at most 64 characters. */
const PLAIN_EXPECTED = /^[A-Za-z0-9_ |<>=.,-]{1,64}$/

/**
 * What a PayloadIssue says of a validator's issue: never its message,
 * since valibot's quote the value refused (`Invalid type: Expected string
 * but received "..."`) and zod's may too, but `expected <type>` when the
 * issue names what it expected in a short plain form (zod and valibot do
 * on type and length issues: `expected string`, `expected <=5`), and
 * `invalid value` otherwise. A key a valibot strict object refuses is an
 * `unknown field`, as zod's are.
 */
function issueMessage(issue: StandardSchemaV1.Issue): string {
  const { expected, type } = issue as { expected?: unknown; type?: unknown }
  if (type === 'strict_object' && expected === 'never') return 'unknown field'
  if (typeof expected === 'string' && PLAIN_EXPECTED.test(expected)) return `expected ${expected}`
  return 'invalid value'
}

/** The dotted path of the first field of input that output dropped, if any. */
function unknownField(input: unknown, output: unknown, path: string[]): string | undefined {
  if (Array.isArray(input) && Array.isArray(output) && input.length === output.length) {
    for (let i = 0; i < input.length; i++) {
      const found = unknownField(input[i], output[i], [...path, String(i)])
      if (found !== undefined) return found
    }
    return undefined
  }
  if (!isRecord(input) || !isRecord(output)) return undefined
  for (const key of Object.keys(input)) {
    if (!(key in output)) return [...path, key].join('.')
    const found = unknownField(input[key], output[key], [...path, key])
    if (found !== undefined) return found
  }
  return undefined
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}
