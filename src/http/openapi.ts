import type { StandardJSONSchemaV1, StandardSchemaV1 } from '@standard-schema/spec'
import { JOB_STATUSES } from '../job.js'
import { optionsObject } from '../options.js'
import { MISSED } from '../schedule.js'
import { PROBLEMS, PROBLEM_MEDIA_TYPE, type ProblemCode } from './problem.js'

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` })
const problemResponse = (description: string) => ({
  description,
  content: { [PROBLEM_MEDIA_TYPE]: { schema: ref('Problem') } },
})
const jobId = {
  name: 'id',
  in: 'path',
  required: true,
  description: 'A job id: a UUID version 7 (the enqueue time, then 74 random bits), or version 4 for a job stored by an earlier jobtable.',
  schema: { type: 'string', format: 'uuid' },
}
const kindName = {
  name: 'kind',
  in: 'path',
  required: true,
  description: 'A kind name, registered here or not.',
  schema: { type: 'string', minLength: 1, maxLength: 256 },
}
const cooldownKeyParam = {
  name: 'key',
  in: 'path',
  required: true,
  description:
    "A cooldown's key, percent-encoded: a rate limit's bucket (a kind's name, a shared name such as `provider:models`, or `<kind>@<scope>` for a per-scope limit), or the key a handler gave `job.rateLimited`.",
  schema: { type: 'string', minLength: 1, maxLength: 1024 },
}
const epochMs = (description: string) => ({ type: 'integer', description: `${description}, in epoch milliseconds.` })
const epochMsOrNull = (description: string) => ({ type: ['integer', 'null'], description: `${description}, in epoch milliseconds.` })
const authErrors = {
  '401': problemResponse('No valid credentials (`unauthenticated`).'),
  '403': problemResponse('The caller may not use the API (`forbidden`).'),
}
const serverErrors = {
  '405': problemResponse('Method not allowed on this route (`method_not_allowed`); the Allow header lists those that are.'),
  '500': problemResponse('Internal error (`internal_error`).'),
  '503': problemResponse('The job store is busy (`unavailable`); retry after the Retry-After header.'),
}

/**
 * The OpenAPI 3.1 document of the HTTP API, without its kinds: every
 * payload an arbitrary value. A mounted API serves the document of its
 * runner's kinds (openApiDocumentFor) at `GET /api/v1/openapi.json`. The
 * test suite checks real responses against its schemas, so it describes
 * what the server does, not what it should.
 */
export const openApiDocument = {
  openapi: '3.1.0',
  info: {
    title: 'jobtable HTTP API',
    version: '1.0.0',
    description:
      'Durable background jobs. Every job belongs to the scope of the caller that enqueued it; a caller sees only its own, and a job of another scope answers exactly as a missing one.',
    license: { name: 'MIT', identifier: 'MIT' },
  },
  servers: [{ url: '/', description: 'The origin the API is mounted on.' }],
  components: {
    securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } },
    schemas: {
      Job: {
        type: 'object',
        required: ['id', 'kind', 'status', 'result', 'error', 'attempt', 'maxAttempts', 'priority', 'runAt'],
        additionalProperties: false,
        properties: {
          id: { type: 'string', format: 'uuid' },
          kind: { type: 'string' },
          status: { type: 'string', enum: [...JOB_STATUSES] },
          result: { description: 'The latest partial or final public result; null until the handler publishes one.' },
          error: {
            type: ['string', 'null'],
            description: 'Set only on a failed job: a failure code the kind declared, internal_error, unknown_kind or "interrupted by restart".',
          },
          attempt: { type: 'integer', minimum: 0, description: 'How many times a runner has claimed the job: 0 until it first starts.' },
          maxAttempts: { type: 'integer', minimum: 1, description: 'How many attempts it may have: 1 unless its kind retries; a snooze gives one back.' },
          priority: { type: 'integer', description: 'Higher runs first; 0 unless enqueued with one.' },
          runAt: {
            type: ['integer', 'null'],
            description: 'When the job is (or was) due, in epoch milliseconds; null when it was enqueued without a due time. A job due later is scheduled until then.',
          },
        },
      },
      JobPage: {
        type: 'object',
        required: ['jobs', 'nextCursor'],
        additionalProperties: false,
        properties: {
          jobs: { type: 'array', items: ref('Job') },
          nextCursor: { type: ['string', 'null'], description: 'Pass as `cursor` for the next page; null on the last page.' },
        },
      },
      EnqueueRequest: {
        type: 'object',
        required: ['kind', 'payload'],
        additionalProperties: false,
        properties: {
          kind: { type: 'string', minLength: 1, maxLength: 256 },
          payload: { description: "The job's payload, validated by the kind's schema." },
          uniqueKey: {
            type: 'string',
            minLength: 1,
            maxLength: 256,
            description: "While a job of this kind and the caller's scope with this key is scheduled, queued or running, no other is stored: the answer is that job (200).",
          },
        },
      },
      PausedKinds: {
        type: 'object',
        required: ['paused'],
        additionalProperties: false,
        properties: {
          paused: {
            type: 'array',
            items: {
              type: 'object',
              required: ['kind', 'pausedAt'],
              additionalProperties: false,
              properties: { kind: { type: 'string' }, pausedAt: { type: 'number', description: 'When it was paused, in epoch milliseconds.' } },
            },
          },
        },
      },
      Schedules: {
        type: 'object',
        required: ['schedules'],
        additionalProperties: false,
        properties: {
          schedules: {
            type: 'array',
            description: 'The recurring schedules the serving runner declared, in declaration order. Never a payload or enqueue options.',
            items: {
              type: 'object',
              required: ['name', 'kind', 'cron', 'timezone', 'missed', 'lastTickAt', 'nextTickAt'],
              additionalProperties: false,
              properties: {
                name: { type: 'string' },
                kind: { type: 'string' },
                cron: { type: 'string', description: 'Its five-field cron pattern, as declared.' },
                timezone: { type: 'string', description: 'The IANA time zone its pattern is read in.' },
                missed: { type: 'string', enum: [...MISSED], description: 'What it does with ticks missed while nothing ran.' },
                lastTickAt: { type: ['integer', 'null'], description: 'The last tick the database recorded, in epoch milliseconds; null until a started runner records one.' },
                nextTickAt: { type: ['integer', 'null'], description: "Its first tick after now by the server's clock, in epoch milliseconds; null when its pattern names no later time." },
              },
            },
          },
        },
      },
      Counts: {
        type: 'object',
        required: ['counts'],
        additionalProperties: false,
        properties: {
          counts: {
            type: 'array',
            description: "The caller's jobs by kind and status: one entry per pair with at least one job, sorted by kind, then by status in lifecycle order.",
            items: {
              type: 'object',
              required: ['kind', 'status', 'count'],
              additionalProperties: false,
              properties: {
                kind: { type: 'string' },
                status: { type: 'string', enum: [...JOB_STATUSES] },
                count: { type: 'integer', minimum: 1 },
              },
            },
          },
        },
      },
      Cooldown: {
        type: 'object',
        required: ['key', 'until'],
        additionalProperties: false,
        properties: {
          key: { type: 'string', description: "The bucket it pauses: no job whose rate-limit bucket (its kind's name, without a rate limit) is this key is claimed before `until`." },
          until: epochMs('When it ends'),
        },
      },
      Cooldowns: {
        type: 'object',
        required: ['cooldowns'],
        additionalProperties: false,
        properties: { cooldowns: { type: 'array', description: 'The cooldowns in force now, by key.', items: ref('Cooldown') } },
      },
      RateLimitState: {
        type: 'object',
        required: ['key', 'kinds', 'limit', 'periodMs', 'perScope', 'used', 'resetAt', 'cooldownUntil'],
        additionalProperties: false,
        properties: {
          key: { type: 'string', description: "The bucket: a kind's name, a name several kinds share, or `<kind>@*` for a kind's per-scope buckets." },
          kinds: { type: 'array', items: { type: 'string' }, description: 'The kinds drawing on it, sorted.' },
          limit: { type: 'integer', minimum: 1, description: 'Claims allowed per period.' },
          periodMs: { type: 'integer', minimum: 1, description: 'The sliding window, in milliseconds.' },
          perScope: { type: 'boolean', description: 'Whether each scope has a budget of its own.' },
          used: { type: 'integer', minimum: 0, description: "Claims in the window now; for a per-scope limit, its busiest scope's." },
          resetAt: epochMsOrNull('When the oldest claim in the window leaves it (null when none is in it)'),
          scopes: {
            type: 'array',
            description: 'A per-scope limit only: the scopes with claims in the window.',
            items: {
              type: 'object',
              required: ['scope', 'used', 'resetAt'],
              additionalProperties: false,
              properties: {
                scope: { type: 'string', description: 'The scope; empty for jobs enqueued without one.' },
                used: { type: 'integer', minimum: 0 },
                resetAt: epochMsOrNull("When the scope's oldest claim in the window leaves it"),
              },
            },
          },
          cooldownUntil: epochMsOrNull('The end of a cooldown in force on this key, or null'),
        },
      },
      RateLimits: {
        type: 'object',
        required: ['rateLimits'],
        additionalProperties: false,
        properties: { rateLimits: { type: 'array', description: 'Every rate limit of the kinds the serving runner registered.', items: ref('RateLimitState') } },
      },
      Activity: {
        type: 'object',
        required: ['since', 'minutes', 'finished', 'queued'],
        additionalProperties: false,
        properties: {
          since: epochMs('The start of the window, a whole minute'),
          minutes: { type: 'integer', minimum: 1, maximum: 1440, description: 'The length of the window.' },
          finished: {
            type: 'array',
            description: 'Jobs that finished in each minute of the window, by status; a minute and status with none is left out.',
            items: {
              type: 'object',
              required: ['minute', 'status', 'count'],
              additionalProperties: false,
              properties: {
                minute: epochMs("The minute's start"),
                status: { type: 'string', enum: ['succeeded', 'failed', 'cancelled'] },
                count: { type: 'integer', minimum: 1 },
              },
            },
          },
          queued: {
            type: 'array',
            description: 'Jobs queued now, by kind.',
            items: {
              type: 'object',
              required: ['kind', 'count'],
              additionalProperties: false,
              properties: { kind: { type: 'string' }, count: { type: 'integer', minimum: 0 } },
            },
          },
        },
      },
      KindPause: {
        type: 'object',
        required: ['kind', 'paused', 'changed'],
        additionalProperties: false,
        properties: { kind: { type: 'string' }, paused: { type: 'boolean' }, changed: { type: 'boolean' } },
      },
      Problem: {
        type: 'object',
        required: ['type', 'title', 'status', 'code'],
        additionalProperties: false,
        properties: {
          type: { type: 'string', description: 'urn:jobtable:problem:{code}' },
          title: { type: 'string' },
          status: { type: 'integer' },
          code: { type: 'string', enum: Object.keys(PROBLEMS) as ProblemCode[] },
          detail: { type: 'string' },
          issues: {
            type: 'array',
            description: 'The failing fields (paths only, never values).',
            items: { type: 'object', required: ['path'], additionalProperties: false, properties: { path: { type: 'string' } } },
          },
        },
      },
    },
  },
  security: [{ bearer: [] }, {}],
  paths: {
    '/api/v1/jobs': {
      get: {
        operationId: 'listJobs',
        summary: "A page of the caller's jobs, newest first.",
        parameters: [
          { name: 'status', in: 'query', schema: { type: 'string', enum: [...JOB_STATUSES] } },
          { name: 'kind', in: 'query', schema: { type: 'string', minLength: 1, maxLength: 256 } },
          { name: 'limit', in: 'query', schema: { type: 'integer', minimum: 1, maximum: 1000, default: 50 } },
          { name: 'cursor', in: 'query', schema: { type: 'string' }, description: 'The nextCursor of the previous page.' },
        ],
        responses: {
          '200': { description: 'A page of jobs.', content: { 'application/json': { schema: ref('JobPage') } } },
          '400': problemResponse('An unknown or repeated parameter, or one out of range (`invalid_argument`); a cursor this API did not give (`invalid_cursor`).'),
          ...authErrors,
          ...serverErrors,
        },
      },
      post: {
        operationId: 'enqueueJob',
        summary: "Enqueues a job of a kind registered with enqueueOverHttp, in the caller's scope.",
        requestBody: { required: true, content: { 'application/json': { schema: ref('EnqueueRequest') } } },
        responses: {
          '200': {
            description: 'A live job of the kind and scope already holds the `uniqueKey`: that job, and nothing stored.',
            headers: { Location: { schema: { type: 'string' }, description: 'The URL of the job.' } },
            content: { 'application/json': { schema: ref('Job') } },
          },
          '201': {
            description: 'The job, as stored.',
            headers: { Location: { schema: { type: 'string' }, description: 'The URL of the job.' } },
            content: { 'application/json': { schema: ref('Job') } },
          },
          '400': problemResponse('The body is not JSON (`malformed_json`) or not a {kind, payload, uniqueKey?} object (`invalid_request`).'),
          ...authErrors,
          '413': problemResponse('The body is over the size limit (`payload_too_large`).'),
          '415': problemResponse('The body is not application/json, or is compressed (`unsupported_media_type`).'),
          '422': problemResponse('No kind of that name may be enqueued over HTTP (`unknown_kind`), or the payload does not fit its schema (`invalid_payload`, with the failing paths in `issues`).'),
          ...serverErrors,
        },
      },
    },
    '/api/v1/jobs/{id}': {
      get: {
        operationId: 'getJob',
        summary: 'One job of the caller.',
        parameters: [jobId],
        responses: {
          '200': { description: 'The job.', content: { 'application/json': { schema: ref('Job') } } },
          '400': problemResponse('The id is not a UUID (`invalid_id`).'),
          ...authErrors,
          '404': problemResponse('No job of the caller has this id (`not_found`), including a job of another scope.'),
          ...serverErrors,
        },
      },
    },
    '/api/v1/jobs/{id}/events': {
      get: {
        operationId: 'streamJob',
        summary: "Server-Sent Events of one job: an `event: job` message with the job's fields at first and at each change of status or result, ending after a terminal status.",
        parameters: [jobId],
        responses: {
          '200': {
            description: 'An event stream; each `data:` line is a Job. An `event: error` message with `{"code": ...}` ends a stream whose job can no longer be read.',
            content: { 'text/event-stream': { schema: { type: 'string' }, 'x-event-data': ref('Job') } },
          },
          '400': problemResponse('The id is not a UUID (`invalid_id`).'),
          ...authErrors,
          '404': problemResponse('No job of the caller has this id (`not_found`).'),
          ...serverErrors,
        },
      },
    },
    '/api/v1/jobs/{id}/cancel': {
      post: {
        operationId: 'cancelJob',
        summary: 'Cancels one job of the caller: a queued or scheduled job is cancelled at once; a running one has its signal aborted wherever it runs and ends cancelled when its handler returns.',
        parameters: [jobId],
        responses: {
          '200': { description: 'The job, cancelled.', content: { 'application/json': { schema: ref('Job') } } },
          '202': { description: 'The job, still running: its cancellation is requested.', content: { 'application/json': { schema: ref('Job') } } },
          '400': problemResponse('The id is not a UUID (`invalid_id`).'),
          ...authErrors,
          '404': problemResponse('No job of the caller has this id (`not_found`), including a job of another scope.'),
          '409': problemResponse('The job has already finished (`job_finished`); nothing was changed.'),
          ...serverErrors,
        },
      },
    },
    '/api/v1/jobs/{id}/retry': {
      post: {
        operationId: 'retryJob',
        summary:
          "Runs one job of the caller again now: a scheduled job (waiting for its due time or its next attempt) becomes due now; a failed or cancelled one is queued now for one more attempt, its error cleared and its last result kept. Either is then queued.",
        parameters: [jobId],
        responses: {
          '200': { description: 'The job, queued and due now.', content: { 'application/json': { schema: ref('Job') } } },
          '400': problemResponse('The id is not a UUID (`invalid_id`).'),
          ...authErrors,
          '404': problemResponse('No job of the caller has this id (`not_found`), including a job of another scope.'),
          '409': problemResponse(
            'The job is queued, running or succeeded (`job_not_retryable`), or another live job of its kind and scope now holds its unique key (`unique_key_held`); nothing was changed.',
          ),
          ...serverErrors,
        },
      },
    },
    '/api/v1/stats': {
      get: {
        operationId: 'countJobs',
        summary: "The caller's jobs counted by kind and status. It reads every job of the caller's scope.",
        responses: {
          '200': { description: 'The counts.', content: { 'application/json': { schema: ref('Counts') } } },
          '400': problemResponse('A query parameter was given (`invalid_argument`): this route takes none.'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/kinds/paused': {
      get: {
        operationId: 'listPausedKinds',
        summary: 'The kinds paused for every process on the database. Operators only (see operatorScope).',
        responses: {
          '200': { description: 'The paused kinds.', content: { 'application/json': { schema: ref('PausedKinds') } } },
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/schedules': {
      get: {
        operationId: 'listSchedules',
        summary:
          "The recurring schedules the serving process declared, each with its kind, cron pattern, time zone, last recorded tick and next tick; never a payload. A schedule only other processes declare is not listed. Operators only (see operatorScope).",
        responses: {
          '200': { description: 'The schedules.', content: { 'application/json': { schema: ref('Schedules') } } },
          '400': problemResponse('A query parameter was given (`invalid_argument`): this route takes none.'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/kinds/{kind}/pause': {
      post: {
        operationId: 'pauseKind',
        summary: 'Pauses a kind for every process and across restarts: its queued jobs stay queued, running ones finish. Operators only (see operatorScope).',
        parameters: [kindName],
        responses: {
          '200': { description: 'The kind is paused; `changed` is false when it already was.', content: { 'application/json': { schema: ref('KindPause') } } },
          '400': problemResponse('The kind name is empty or longer than 256 characters (`invalid_request`).'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/kinds/{kind}/resume': {
      post: {
        operationId: 'resumeKind',
        summary: "Lets a paused kind's jobs be claimed again. Operators only (see operatorScope).",
        parameters: [kindName],
        responses: {
          '200': { description: 'The kind is not paused; `changed` is false when it was not.', content: { 'application/json': { schema: ref('KindPause') } } },
          '400': problemResponse('The kind name is empty or longer than 256 characters (`invalid_request`).'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/rate-limits': {
      get: {
        operationId: 'listRateLimits',
        summary:
          "Each rate limit of the serving runner's kinds: its key, the kinds drawing on it, its limit and window, the claims in the window now and when the oldest leaves it, and any cooldown in force on it. Operators only (see operatorScope).",
        responses: {
          '200': { description: 'The rate limits.', content: { 'application/json': { schema: ref('RateLimits') } } },
          '400': problemResponse('A query parameter was given (`invalid_argument`): this route takes none.'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/cooldowns': {
      get: {
        operationId: 'listCooldowns',
        summary:
          "The cooldowns in force for every process on the database: each key no job is claimed for until its end, set by a handler's `job.rateLimited` (a provider's reset). Operators only (see operatorScope).",
        responses: {
          '200': { description: 'The cooldowns.', content: { 'application/json': { schema: ref('Cooldowns') } } },
          '400': problemResponse('A query parameter was given (`invalid_argument`): this route takes none.'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/api/v1/cooldowns/{key}': {
      delete: {
        operationId: 'clearCooldown',
        summary: "Ends a key's cooldown now, for every process: its jobs may be claimed again (a job the handler sent back stays due at its own time). Operators only (see operatorScope).",
        parameters: [cooldownKeyParam],
        responses: {
          '204': { description: 'The cooldown is cleared.' },
          '400': problemResponse('The key is empty, over 1024 characters, holds a NUL, or is not validly percent-encoded (`invalid_key`).'),
          ...authErrors,
          '404': problemResponse('No cooldown of this key is recorded (`cooldown_not_found`).'),
          ...serverErrors,
        },
      },
    },
    '/api/v1/activity': {
      get: {
        operationId: 'getActivity',
        summary: "Jobs of every scope finished per minute by status over the last `minutes`, and jobs queued now by kind: the dashboard's chart, read from the jobs table. Operators only (see operatorScope).",
        parameters: [{ name: 'minutes', in: 'query', description: 'How many minutes back, ending with the current one.', schema: { type: 'integer', minimum: 1, maximum: 1440, default: 60 } }],
        responses: {
          '200': { description: 'The activity.', content: { 'application/json': { schema: ref('Activity') } } },
          '400': problemResponse('An unknown or repeated parameter, or minutes out of range (`invalid_argument`).'),
          ...authErrors,
          ...serverErrors,
        },
      },
    },
    '/metrics': {
      get: {
        operationId: 'metrics',
        summary:
          "Prometheus metrics of the runner and its queue, when the API was given them (`metrics`). Operators and the metrics scope only, once the API has authorization (see operatorScope and metricsScope). No label carries a payload, a result, an error's text, a job id or a scope.",
        responses: {
          '200': { description: 'The Prometheus text exposition format, version 0.0.4.', content: { 'text/plain': { schema: { type: 'string' } } } },
          ...authErrors,
          '404': problemResponse('This API serves no metrics (`route_not_found`).'),
          ...serverErrors,
        },
      },
    },
    '/api/v1/openapi.json': {
      get: {
        operationId: 'openApi',
        summary: 'This document. It needs no credentials: it holds no data.',
        security: [],
        responses: {
          '200': { description: 'The OpenAPI 3.1 document.', content: { 'application/json': { schema: { type: 'object' } } } },
          '403': problemResponse('The Host header names a host the API is not configured for (`forbidden`).'),
          ...serverErrors,
        },
      },
    },
  },
} as const

/** A kind as the document describes it: its name and its payload schema. */
export interface DocumentKind {
  readonly name: string
  readonly payload: StandardSchemaV1
}

type JsonSchema = Record<string, unknown>

/**
 * The OpenAPI document of an API whose kinds HTTP may enqueue are
 * `kinds`: the enqueue request is one of a shape per kind, its `kind` a
 * constant and its `payload` the JSON Schema of the kind's payload, so a
 * client generated from it (openapi-typescript) checks payloads at
 * compile time. A schema is converted through the Standard JSON Schema
 * interface (`~standard.jsonSchema`, which zod implements, and valibot
 * through `toStandardJsonSchema` of @valibot/to-json-schema); a payload
 * whose schema cannot be converted is any JSON value. Without kinds, it
 * is `openApiDocument`. With `basePath`, its server is that path.
 */
export function openApiDocumentFor(kinds: readonly DocumentKind[], options: { readonly basePath?: string } = {}): typeof openApiDocument {
  const { basePath = '' } = optionsObject(options, ['basePath'], 'openApiDocumentFor', 'argument')
  const servers = basePath === '' ? openApiDocument.servers : [{ url: basePath, description: 'The path the API is mounted under, on the origin that serves it.' }]
  if (kinds.length === 0) return { ...openApiDocument, servers } as typeof openApiDocument
  const schemas: Record<string, unknown> = { ...openApiDocument.components.schemas }
  const variants: { name: string; ref: string }[] = []
  const taken = new Set(Object.keys(schemas))
  for (const kind of kinds) {
    const id = componentName(`Enqueue_${kind.name}`, taken)
    const payload = payloadSchema(kind.payload, id, schemas, taken)
    schemas[id] = {
      type: 'object',
      required: ['kind', 'payload'],
      additionalProperties: false,
      properties: {
        kind: { type: 'string', const: kind.name },
        payload,
        uniqueKey: openApiDocument.components.schemas.EnqueueRequest.properties.uniqueKey,
      },
    }
    variants.push({ name: kind.name, ref: `#/components/schemas/${id}` })
  }
  schemas['EnqueueRequest'] = {
    description: 'A job to enqueue: one shape per kind that may be enqueued over HTTP.',
    oneOf: variants.map((v) => ({ $ref: v.ref })),
    discriminator: { propertyName: 'kind', mapping: Object.fromEntries(variants.map((v) => [v.name, v.ref])) },
  }
  return { ...openApiDocument, servers, components: { ...openApiDocument.components, schemas } } as unknown as typeof openApiDocument
}

/**
 * A reference to the JSON Schema of a kind's payload, stored as the
 * component `<id>_payload`, or an arbitrary value's schema when its
 * library cannot say. Definitions it carries
 * (`$defs`, for a recursive or shared part) move to components named
 * after `id`, with their references rewritten: nested in a component, a
 * reference to `#/$defs/...` would point at the document's root.
 */
function payloadSchema(schema: StandardSchemaV1, id: string, schemas: Record<string, unknown>, taken: Set<string>): JsonSchema {
  const converter = (schema['~standard'] as Partial<StandardJSONSchemaV1.Props>).jsonSchema
  let converted: JsonSchema
  try {
    if (converter === undefined || typeof converter.input !== 'function') throw new Error('no converter')
    converted = converter.input({ target: 'draft-2020-12' })
  } catch {
    return { description: "The job's payload, validated by the kind's schema (which does not describe itself as JSON Schema)." }
  }
  const { $schema: _dialect, $defs, ...rest } = converted
  const own = componentName(`${id}_payload`, taken)
  // "#" (a recursive schema's reference to its root) is the payload's own component.
  const renamed = new Map<string, string>([['#', `#/components/schemas/${own}`]])
  for (const name of Object.keys(($defs as JsonSchema | undefined) ?? {})) renamed.set(`#/$defs/${name}`, `#/components/schemas/${componentName(`${id}_${name}`, taken)}`)
  const rewrite = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(rewrite)
    if (value === null || typeof value !== 'object') return value
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, k === '$ref' && typeof v === 'string' ? (renamed.get(v) ?? v) : rewrite(v)]))
  }
  for (const [name, def] of Object.entries(($defs as JsonSchema | undefined) ?? {})) {
    schemas[renamed.get(`#/$defs/${name}`)!.slice('#/components/schemas/'.length)] = rewrite(def)
  }
  schemas[own] = rewrite(rest)
  return { $ref: `#/components/schemas/${own}` }
}

/** A component name from `base` (OpenAPI allows letters, digits, `.`, `-` and `_`), not yet taken; marked taken. */
function componentName(base: string, taken: Set<string>): string {
  const clean = base.replace(/[^A-Za-z0-9._-]/g, '_')
  let name = clean
  for (let n = 2; taken.has(name); n++) name = `${clean}_${n}`
  taken.add(name)
  return name
}
