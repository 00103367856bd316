/**
 * jobtable/http: the HTTP API of a runner as a standard fetch handler.
 *
 * ```ts
 * import { createApi, bearerTokens } from 'jobtable/http'
 * const api = createApi({ runner, authorize: bearerTokens({ [token]: 'household-1' }) })
 * // Node: serve({ fetch: api.fetch }) from @hono/node-server; Next.js: export const GET = api.fetch
 * ```
 */
export { createApi, type Api, type ApiOptions } from './api.js'
export { bearerTokens, isRefusal, FORBIDDEN, UNAUTHENTICATED, MIN_TOKEN_LENGTH, type Authorize, type Refusal } from './auth.js'
export { PROBLEMS, PROBLEM_MEDIA_TYPE, problemType, type ProblemCode } from './problem.js'
export { openApiDocument, openApiDocumentFor, type DocumentKind } from './openapi.js'
export { listen, nodeListener, isLoopback, UnsafeBindError, type ListenOptions, type Listening } from './server.js'
export { metricsHandler, type MetricsHandlerOptions, type MetricsSource } from './metrics.js'
