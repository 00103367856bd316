import { createHash, timingSafeEqual } from 'node:crypto'

/** How an `authorize` hook refuses a request: 401 (who are you?) or 403 (not you). */
export interface Refusal {
  readonly refused: 'unauthenticated' | 'forbidden'
}

/** Refuses a caller that did not prove who it is: 401 with `WWW-Authenticate: Bearer`. */
export const UNAUTHENTICATED: Refusal = Object.freeze({ refused: 'unauthenticated' })
/** Refuses a known caller that may not use the API: 403. */
export const FORBIDDEN: Refusal = Object.freeze({ refused: 'forbidden' })

/**
 * Decides who a request comes from: returns the caller's scope (a
 * household, a tenant: the owner scope its jobs are enqueued, read, listed
 * and streamed under) or a Refusal. It must not consume the request body.
 * A hook that throws answers 500 `internal_error`, and its error is not
 * logged with its message. A scope must be a non-empty string of at most
 * 256 characters without control characters: any other answer is the
 * application's misconfiguration, answered 500 `internal_error` on every
 * route (with a detail saying so) and logged with the code
 * `invalid_scope` and its reason, never the value.
 */
export type Authorize = (request: Request) => string | Refusal | Promise<string | Refusal>

/**
 * Why a scope cannot be used, or undefined when it can: jobtable stores a
 * scope only as a non-empty string of at most 256 characters without
 * control characters (the rule an enqueue applies: a NUL cannot be stored
 * in a PostgreSQL text column, and none belongs in an owner's name).
 */
export function scopeFault(scope: unknown): 'not_a_scope' | 'length' | 'control_characters' | undefined {
  if (typeof scope !== 'string') return 'not_a_scope'
  if (scope.length === 0 || scope.length > 256) return 'length'
  if (/[\u0000-\u001f\u007f]/.test(scope)) return 'control_characters'
  return undefined
}

/** What a configured scope must be, for configuration errors (never quoting the scope). */
export const SCOPE_RULE = 'a non-empty string of at most 256 characters, without control characters'

/** Whether a value an authorize hook returned is a Refusal. */
export function isRefusal(value: unknown): value is Refusal {
  return typeof value === 'object' && value !== null && ((value as Refusal).refused === 'unauthenticated' || (value as Refusal).refused === 'forbidden')
}

/** The shortest bearer token `bearerTokens` accepts: shorter ones are guessable. */
export const MIN_TOKEN_LENGTH = 16

/**
 * An authorize hook for bearer tokens, each mapped to the scope its holder
 * owns. A presented token is hashed and compared with the hash of every
 * configured token through `timingSafeEqual`, always all of them, so the
 * time taken says nothing about how much of a token matched or which one.
 * A missing, malformed or unknown token answers 401.
 */
export function bearerTokens(tokens: ReadonlyMap<string, string> | Readonly<Record<string, string>>): Authorize {
  const entries = tokens instanceof Map ? [...tokens.entries()] : Object.entries(tokens)
  if (entries.length === 0) throw new TypeError('jobtable/http: bearerTokens needs at least one token')
  const known = entries.map(([token, scope]) => {
    if (typeof token !== 'string' || token.length < MIN_TOKEN_LENGTH || /\s/.test(token)) {
      throw new TypeError(`jobtable/http: every bearer token must be at least ${MIN_TOKEN_LENGTH} characters without spaces`)
    }
    if (scopeFault(scope) !== undefined) throw new TypeError(`jobtable/http: every token needs a scope: ${SCOPE_RULE}`)
    return { hash: sha256(token), scope }
  })
  return (request) => {
    const match = /^Bearer +([^\s]+) *$/i.exec(request.headers.get('authorization') ?? '')
    if (!match) return UNAUTHENTICATED
    const presented = sha256(match[1]!)
    let scope: string | undefined
    for (const entry of known) {
      // No early exit: every token is compared whatever matched before.
      if (timingSafeEqual(entry.hash, presented) && scope === undefined) scope = entry.scope
    }
    return scope ?? UNAUTHENTICATED
  }
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest()
}
