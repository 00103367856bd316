/**
 * Kinds whose handlers, schemas and projections hold a secret marker and
 * try every way of letting it out (secret-marker.test.ts). Registered in
 * the test's own process with `registerSecretKinds`, or by `jobtable
 * serve --kinds` through `registerKinds`, which reads the marker from
 * JT_SECRET_MARKER, the control text from JT_SECRET_CONTROL, the side
 * file from JT_SECRET_SIDE and PostgreSQL's URL from JT_SECRET_PG_URL.
 *
 * Nothing here puts the marker in a payload: payloads are stored by
 * design. The handler's own side channel (`side`) does receive it, so the
 * test can show its search finds what the handlers hold.
 */
import { appendFileSync } from 'node:fs'
import { inspect } from 'node:util'
import Database from 'better-sqlite3'
import pg from 'pg'
import * as v from 'valibot'
import { z } from 'zod'
import { JobFailure, type JobContext, type Runner } from 'jobtable'

export interface SecretSetup {
  readonly marker: string
  /** Text that is stored and shown by design: the name of the control kind, and its payload and result. */
  readonly control: string
  /** The handlers' own side channel: each writes down the secret it holds. */
  side(text: string): void
  /** A PostgreSQL to make a query of its own against, if any. */
  readonly pgUrl?: string | undefined
}

/** A value in a result or payload that the test's database trigger refuses, quoting the row it refuses. */
export const REFUSED = 'refuse_me'

const aborted = (signal: AbortSignal) => new Promise<void>((resolve) => (signal.aborted ? resolve() : signal.addEventListener('abort', () => resolve(), { once: true })))
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** An object that throws an Error quoting m at every look: a property, a key, its prototype. */
export function touchy(m: string): object {
  const trap = () => {
    throw new Error(m)
  }
  return new Proxy({}, { get: trap, has: trap, ownKeys: trap, getPrototypeOf: trap, getOwnPropertyDescriptor: trap })
}

type Way = (m: string, job: JobContext<unknown>, setup: SecretSetup) => unknown

/** How each job of the kind `leaky` lets the marker out, by the way its payload names. */
export const HANDLER_WAYS: Record<string, Way> = {
  message: (m) => {
    throw new Error(m)
  },
  stack: (m) => {
    const e = new Error('boom')
    e.stack = `Error: boom\n    at handler (${m}:1:1)`
    throw e
  },
  'cause chain': (m) => {
    throw new Error('outer', { cause: new Error('middle', { cause: new TypeError(m) }) })
  },
  AggregateError: (m) => {
    throw new AggregateError([new Error(m), m], `several: ${m}`)
  },
  'thrown string': (m) => {
    throw m
  },
  'thrown object': (m) => {
    throw { message: m, secret: m, nested: { token: m } }
  },
  toString: (m: string) => {
    throw { toString: () => m }
  },
  toJSON: (m) => {
    throw Object.assign(new Error('x'), { toJSON: () => ({ secret: m }) })
  },
  'custom inspect': (m) => {
    throw { [inspect.custom]: () => m }
  },
  'error name': (m) => {
    const e = new Error('x')
    e.name = m
    throw e
  },
  'code equal to the marker': (m) => {
    throw Object.assign(new Error('x'), { code: m, errno: m, syscall: m })
  },
  'undeclared failure code': (m, job) => job.fail(m),
  'declared code carrying the marker': (m) => {
    throw Object.assign(new JobFailure<'declared_code'>('declared_code'), { message: m, detail: m, cause: new Error(m) })
  },
  'failure whose code getter throws': (m) => {
    const f = new JobFailure<'declared_code'>('declared_code')
    Object.defineProperty(f, 'code', {
      get() {
        throw new Error(m)
      },
    })
    throw f
  },
  'thrown Symbol': (m) => {
    throw Symbol(m)
  },
  'thrown number': () => {
    throw 42
  },
  'thrown null': () => {
    throw null
  },
  'rejected error whose getters throw': (m) => {
    const e = new Error('x')
    for (const key of ['message', 'stack', 'name', 'code', 'cause']) {
      Object.defineProperty(e, key, {
        enumerable: true,
        get() {
          throw new Error(m)
        },
      })
    }
    return Promise.reject(e)
  },
  'a Proxy that throws at every look': (m) => {
    throw touchy(m)
  },
  'a throw after cancel': async (m, job) => {
    await aborted(job.signal)
    throw new Error(m)
  },
  'a throw after abort (stop)': async (m, job) => {
    await aborted(job.signal)
    throw new Error(m)
  },
  'a SQLite error quoting the marker': (m) => {
    const db = new Database(':memory:')
    try {
      // "no such table: <marker>"
      return db.prepare(`SELECT * FROM "${m}"`).get()
    } finally {
      db.close()
    }
  },
  'a PostgreSQL error quoting the marker': async (m, _job, setup) => {
    if (setup.pgUrl === undefined) throw new Error(m)
    const client = new pg.Client({ connectionString: setup.pgUrl })
    await client.connect()
    try {
      // invalid input syntax for type integer: "<marker>"
      return await client.query('SELECT $1::int', [m])
    } finally {
      await client.end()
    }
  },
  'a result the database refuses, quoting it': (m) => ({ note: REFUSED, secret: m }),
  'a partial result the database refuses, quoting it': async (m, job) => {
    try {
      await job.publish({ note: REFUSED, secret: m })
    } catch (err) {
      throw new Error(`publish failed for ${m}`, { cause: err })
    }
    return { published: true }
  },
  'a partial result that is not JSON': async (m, job) => {
    await job.publish({ secret: m, n: 10n })
    return { published: true }
  },
  'a result that is not JSON': (m) => ({ secret: m, when: new Date() }),
  'a result with a throwing toJSON': (m) => ({
    toJSON() {
      throw new Error(m)
    },
  }),
}

/** Ways needing a kind of their own (retries, a deadline, a projection), by kind. */
export const KIND_WAYS: Record<string, string> = {
  leaky_retry: 'a retry: attempts 1 and 2 throw the marker, attempt 3 succeeds',
  leaky_timeout: 'a timeout: the handler throws the marker when its deadline aborts it',
  leaky_timeout_late: 'a timeout the handler ignores, throwing the marker after the grace',
  leaky_projection: 'a result projection that throws the marker',
  leaky_result_schema: 'a result schema (valibot) whose refusal quotes the marker',
}

const way = z.strictObject({ way: z.string() })
const nothing = z.strictObject({})

export function registerSecretKinds(runner: Runner, setup: SecretSetup): void {
  const m = setup.marker
  runner.register('leaky', {
    payload: way,
    result: (r: unknown) => r,
    failures: ['declared_code'],
    enqueueOverHttp: true,
    handler: (payload, job) => {
      setup.side(`${payload.way}: ${m}`)
      const run = HANDLER_WAYS[payload.way]
      if (run === undefined) throw new Error(`no way ${payload.way}`)
      return run(m, job as JobContext<unknown>, setup)
    },
  })
  runner.register('leaky_retry', {
    payload: nothing,
    result: (r: { attempt: number }) => r,
    retry: { maxAttempts: 3, codes: ['internal_error'], backoff: { baseMs: 10, maxMs: 20 } },
    enqueueOverHttp: true,
    handler: (_p, job) => {
      setup.side(`retry ${job.attempt}: ${m}`)
      if (job.attempt < 3) throw new Error(`attempt ${job.attempt}: ${m}`)
      return { attempt: job.attempt }
    },
  })
  runner.register('leaky_timeout', {
    payload: nothing,
    timeoutMs: 100,
    enqueueOverHttp: true,
    handler: async (_p, job) => {
      setup.side(`timeout: ${m}`)
      await aborted(job.signal)
      throw new Error(`deadline: ${m}`, { cause: job.signal.reason })
    },
  })
  runner.register('leaky_timeout_late', {
    payload: nothing,
    timeoutMs: 100,
    enqueueOverHttp: true,
    handler: async () => {
      setup.side(`late: ${m}`)
      await sleep(1_300) // past the deadline and the runner's 1 s grace
      throw new Error(`late: ${m}`)
    },
  })
  runner.register('leaky_projection', {
    payload: nothing,
    enqueueOverHttp: true,
    result: (r: { secret: string }) => {
      throw new Error(`projection refused ${r.secret}`)
    },
    handler: () => ({ secret: m }),
  })
  runner.register('leaky_result_schema', {
    payload: nothing,
    enqueueOverHttp: true,
    // valibot's ValiError: `Invalid type: Expected number but received "<marker>"`.
    result: (r: { n: unknown }) => v.parse(v.strictObject({ n: v.number() }), r),
    handler: () => ({ n: m }),
  })
  // Validators that quote the value they refuse, or throw it.
  runner.register('leaky_zod', {
    payload: z.strictObject({ text: z.string().refine(() => false, { error: (issue) => `refused ${String(issue.input)}` }) }),
    enqueueOverHttp: true,
    handler: () => undefined,
  })
  runner.register('leaky_valibot', {
    // valibot's own message: `Invalid type: Expected number but received "<value>"`.
    payload: v.strictObject({ n: v.number() }),
    enqueueOverHttp: true,
    handler: () => undefined,
  })
  runner.register('leaky_throwing_validator', {
    payload: z.strictObject({
      text: z.string().refine((text) => {
        throw Object.assign(new Error(`validator failed on ${text}`), { code: text, name: text })
      }),
    }),
    enqueueOverHttp: true,
    handler: () => undefined,
  })
  runner.register('leaky_touchy_validator', {
    payload: z.strictObject({
      text: z.string().refine(() => {
        throw touchy(m)
      }),
    }),
    enqueueOverHttp: true,
    handler: () => undefined,
  })
  runner.register('leaky_text', {
    payload: z.strictObject({ text: z.string() }),
    enqueueOverHttp: true,
    handler: () => undefined,
  })
  // The control: its name, payload and result hold text that is stored, shown, logged and counted by design.
  runner.register(`control ${setup.control}`, {
    payload: z.strictObject({ text: z.string(), fail: z.boolean() }),
    result: (r: { text: string }) => r,
    failures: ['control_failure'],
    enqueueOverHttp: true,
    handler: async ({ text, fail }, job) => {
      await job.publish({ text })
      if (fail) job.fail('control_failure')
      return { text }
    },
  })
}

/** The entry point of `jobtable serve --kinds`: the same kinds, set up from the environment. */
export function registerKinds(runner: Runner): void {
  const need = (name: string) => {
    const value = process.env[name]
    if (value === undefined) throw new Error(`${name} is required`)
    return value
  }
  const sideFile = need('JT_SECRET_SIDE')
  registerSecretKinds(runner, {
    marker: need('JT_SECRET_MARKER'),
    control: need('JT_SECRET_CONTROL'),
    side: (text) => appendFileSync(sideFile, text + '\n'),
    pgUrl: process.env['JT_SECRET_PG_URL'],
  })
}
