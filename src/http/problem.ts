/**
 * Error answers of the HTTP API: RFC 9457 problem documents with a stable
 * `code`. Each title and detail is fixed text chosen here, so no answer can
 * carry a stack, a parser's message, a database message or any part of the
 * request body back to the caller.
 */

/** Every code the API answers with, its HTTP status and its fixed title. */
export const PROBLEMS = {
  malformed_json: { status: 400, title: 'The request body is not valid JSON' },
  invalid_request: { status: 400, title: 'The request body is not a {kind, payload} object' },
  invalid_argument: { status: 400, title: 'A query parameter is out of its range' },
  invalid_cursor: { status: 400, title: 'The cursor is not one this API gave' },
  invalid_id: { status: 400, title: 'The job id is not a UUID' },
  invalid_key: { status: 400, title: 'The key is not 1 to 400 characters (a NUL refused), or not validly percent-encoded' },
  unauthenticated: { status: 401, title: 'Authentication is required' },
  forbidden: { status: 403, title: 'The caller may not use this API' },
  not_found: { status: 404, title: 'Job not found' },
  route_not_found: { status: 404, title: 'No such route' },
  cooldown_not_found: { status: 404, title: 'No cooldown of that key is recorded' },
  method_not_allowed: { status: 405, title: 'Method not allowed on this route' },
  job_finished: { status: 409, title: 'The job has already finished; nothing was changed' },
  job_not_retryable: { status: 409, title: 'The job is queued, running or succeeded: there is nothing to retry; nothing was changed' },
  unique_key_held: { status: 409, title: "Another live job of the kind and scope holds the job's unique key; nothing was changed" },
  payload_too_large: { status: 413, title: 'The request body is over the size limit' },
  unsupported_media_type: { status: 415, title: 'The request body must be application/json' },
  unknown_kind: { status: 422, title: 'No kind of that name can be enqueued over HTTP' },
  invalid_payload: { status: 422, title: 'The payload does not fit the kind schema' },
  internal_error: { status: 500, title: 'Internal error' },
  unavailable: { status: 503, title: 'The job store is busy; try again' },
} as const satisfies Record<string, { status: number; title: string }>

/** A stable error code of the HTTP API. */
export type ProblemCode = keyof typeof PROBLEMS

/** The media type of every error answer. */
export const PROBLEM_MEDIA_TYPE = 'application/problem+json'

/** The `type` URI of a problem code: a URN, so it promises no page to fetch. */
export function problemType(code: ProblemCode): string {
  return `urn:jobtable:problem:${code}`
}

/** Fields a problem may carry beyond type, title, status and code; all chosen by the API, never copied from a request body. */
export interface ProblemExtras {
  readonly detail?: string
  /** For invalid_payload and invalid_request: the failing field paths, never their values. */
  readonly issues?: readonly { readonly path: string }[]
}

/** Builds the problem response for `code`, with optional extra headers (Allow, WWW-Authenticate, Retry-After). */
export function problem(code: ProblemCode, extras: ProblemExtras = {}, headers: Record<string, string> = {}): Response {
  const { status, title } = PROBLEMS[code]
  const body = { type: problemType(code), title, status, code, ...extras }
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': PROBLEM_MEDIA_TYPE, 'cache-control': 'no-store', ...headers },
  })
}
