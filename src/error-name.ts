import { JobtableError } from './errors.js'

/** The standard error classes, whose names are safe to write down. */
const STANDARD_ERRORS: readonly { readonly prototype: object; readonly name: string }[] = [
  TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError, AggregateError, Error,
]

/** The form of Node's own error codes (ERR_MODULE_NOT_FOUND) and of system errors (ENOENT). */
const NODE_CODE = /^(ERR_[A-Z0-9_]{1,64}|E[A-Z0-9]{2,15})$/

/**
 * What may be written down of an error that is not jobtable's own, in a
 * log line or a command's error line: never its message, and its name and
 * code only where they cannot be anyone's text. Any error's `name` and
 * `code` can be set to anything (a validator's error carrying the value
 * it refused, a module's error quoting its configuration), so a
 * JobtableError gives its class and code, any other error the standard
 * class it descends from and a code only of Node's own form, and any
 * other value its type. Safe for a value that throws when looked at (a
 * Proxy): `unexpected`.
 */
export function errorParts(err: unknown): { readonly name: string; readonly code: string | undefined } {
  try {
    if (err instanceof JobtableError) return { name: err.name, code: err.code }
    if (typeof err !== 'object' || err === null) return { name: typeof err, code: undefined }
    for (let proto: unknown = Object.getPrototypeOf(err); proto !== null; proto = Object.getPrototypeOf(proto)) {
      const standard = STANDARD_ERRORS.find((c) => c.prototype === proto)
      if (standard !== undefined) {
        const code: unknown = (err as { code?: unknown }).code
        return { name: standard.name, code: typeof code === 'string' && NODE_CODE.test(code) ? code : undefined }
      }
    }
    return { name: 'object', code: undefined }
  } catch {
    return { name: 'unexpected', code: undefined }
  }
}

/** errorParts as one phrase: `TypeError`, `Error: ERR_MODULE_NOT_FOUND`. */
export function describeError(err: unknown): string {
  const { name, code } = errorParts(err)
  return code === undefined ? name : `${name}: ${code}`
}
