import { randomUUID } from 'node:crypto'
import { expect, it } from 'vitest'
import { defineKind, JobFailure } from 'jobtable'
import { bearerTokens } from 'jobtable/http'
import { describeEachBackend } from '../support/backends.js'
import { echoPayload, harness } from '../support/harness.js'
import { track } from '../support/wait.js'
import { servers, type Answer } from '../http/client.js'
import { bound, size } from './sizes.js'

/** Jobs each scope holds. */
const JOBS = size('scope_isolation_jobs', 50, 1000)
const TOKENS = { a: 'scope-isolation-token-a-0001', b: 'scope-isolation-token-b-0002' } as const
const SCOPES = { a: 'household-a', b: 'household-b' } as const
type Side = keyof typeof TOKENS
const OTHER: Record<Side, Side> = { a: 'b', b: 'a' }
const HOUR = 3_600_000

/** A kind no runner here has a handler for: its jobs stay queued, or scheduled, for cancel and retry to act on. */
const parked = defineKind('parked', { payload: echoPayload, enqueueOverHttp: true })

/** Every route that names a job, with how the test calls it. */
const JOB_ROUTES = [
  ['GET', ''],
  ['HEAD', ''],
  ['GET', '/events'],
  ['HEAD', '/events'],
  ['POST', '/cancel'],
  ['POST', '/retry'],
] as const

/** What an answer is, for comparing a foreign id's with an unknown id's: status, body byte for byte, header names. */
function shape(a: Answer): string {
  const names: string[] = []
  a.headers.forEach((_v, name) => names.push(name))
  return JSON.stringify([a.status, a.text, names.filter((n) => n !== 'date').sort()])
}

/** Runs fn over items, `width` at a time. */
async function inParallel<T>(items: readonly T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < items.length) await fn(items[next++]!)
  }))
}

describeEachBackend('scope isolation', (backend) => {
  const h = harness(backend)
  const s = servers()

  /**
   * Proves that a scope sees nothing of another's: with two scopes of
   * JOBS jobs each (queued, scheduled, succeeded, failed), every route
   * that takes a job id (read, HEAD, events, cancel, retry) answers the
   * other scope's ids, and unscoped ones, exactly as an unknown id (status,
   * body byte for byte, header names), and changes nothing; lists under
   * every filter and through every page (and from the other scope's
   * cursor), and the stats, hold only the caller's own jobs; a unique key
   * used in one scope never deduplicates the other's enqueue, while it
   * does deduplicate within the scope.
   */
  it('answers every other scope\'s id as missing on every route, changes nothing, and lists, counts and deduplicates within the scope only', async () => {
    const runner = h.runner({ workers: 4 })
    runner.register('echo', { payload: echoPayload, result: (n: number) => ({ n }), handler: ({ n }) => n, enqueueOverHttp: true })
    runner.register('fails', {
      payload: echoPayload,
      failures: ['nope'],
      enqueueOverHttp: true,
      handler: () => {
        throw new JobFailure<'nope'>('nope')
      },
    })
    runner.register(parked)
    const done = track(runner)
    await runner.start()
    const api = await s.serve(runner, { authorize: bearerTokens({ [TOKENS.a]: SCOPES.a, [TOKENS.b]: SCOPES.b }), eventsPollMs: 20 })
    const call = (side: Side, method: string, path: string, body?: unknown) =>
      api.call(method, path, { token: TOKENS[side], ...(body === undefined ? {} : { body: JSON.stringify(body) }) })

    // Each scope's jobs, every one with a unique key; the same keys in both scopes.
    const ids: Record<Side, string[]> = { a: [], b: [] }
    const running: string[] = []
    for (const side of ['a', 'b'] as const) {
      for (let n = 0; n < JOBS; n++) {
        const uniqueKey = `key-${n}`
        let id: string
        if (n % 5 === 2) {
          ;({ id } = await runner.enqueueUnique('parked', { n }, { scope: SCOPES[side], delayMs: HOUR, uniqueKey }))
        } else {
          const kind = n % 5 === 3 ? 'echo' : n % 5 === 4 ? 'fails' : 'parked'
          const a = await call(side, 'POST', '/api/v1/jobs', { kind, payload: { n }, uniqueKey })
          // Never the other scope's job: created here, whatever the other scope holds under the key.
          expect(a.status, `${side} key-${n}`).toBe(201)
          id = a.json.id
          if (kind !== 'parked') running.push(id)
        }
        ids[side].push(id)
      }
    }
    expect(new Set([...ids.a, ...ids.b]).size).toBe(2 * JOBS)
    const unscoped = [await runner.enqueue('parked', { n: -1 }), await runner.enqueue('fails', { n: -2 })]
    running.push(unscoped[1]!)
    await done.ends(running)
    // Within a scope the key does deduplicate: the same button pressed again gets the scope's own job.
    for (const side of ['a', 'b'] as const) {
      for (let n = 0; n < JOBS; n += 5) {
        const again = await call(side, 'POST', '/api/v1/jobs', { kind: 'parked', payload: { n }, uniqueKey: `key-${n}` })
        expect([again.status, again.json.id]).toEqual([200, ids[side][n]])
      }
    }

    const snapshot = async () => Promise.all([...ids.a, ...ids.b, ...unscoped].map(async (id) => JSON.stringify(await runner.get(id))))
    const before = await snapshot()

    // The answers for an id no job has, per route and caller.
    const missing = new Map<string, string>()
    for (const side of ['a', 'b'] as const) {
      for (const [method, suffix] of JOB_ROUTES) {
        const a = await call(side, method, `/api/v1/jobs/${randomUUID()}${suffix}`)
        expect(a.status, `${method} ${suffix}`).toBe(404)
        missing.set(`${side} ${method} ${suffix}`, shape(a))
      }
    }
    let foreignCalls = 0
    const mismatches: string[] = []
    for (const side of ['a', 'b'] as const) {
      const foreign = [...ids[OTHER[side]], ...unscoped]
      await inParallel(foreign, 16, async (id) => {
        for (const [method, suffix] of JOB_ROUTES) {
          foreignCalls++
          const a = await call(side, method, `/api/v1/jobs/${id}${suffix}`)
          if (shape(a) !== missing.get(`${side} ${method} ${suffix}`)) mismatches.push(`${side} ${method} ${id}${suffix}: ${a.status} ${a.text}`)
        }
      })
    }
    expect(mismatches).toEqual([])
    expect(foreignCalls).toBe(2 * (JOBS + unscoped.length) * JOB_ROUTES.length)
    // No foreign cancel or retry changed anything.
    expect(await snapshot()).toEqual(before)

    for (const side of ['a', 'b'] as const) {
      const own = new Set(ids[side])
      const listAll = async (query: string, first?: string) => {
        const listed: { id: string; kind: string; status: string }[] = []
        let cursor: string | null | undefined = first
        do {
          const page: Answer = await call(side, 'GET', `/api/v1/jobs?limit=37${query}${cursor ? `&cursor=${cursor}` : ''}`)
          expect(page.status).toBe(200)
          listed.push(...page.json.jobs)
          cursor = page.json.nextCursor
        } while (cursor)
        return listed
      }
      const all = await listAll('')
      expect(all.map((j) => j.id).sort()).toEqual([...own].sort())
      for (const filter of ['&status=queued', '&status=scheduled', '&status=succeeded', '&status=failed', '&kind=parked', '&kind=echo', '&kind=fails', '&kind=parked&status=scheduled']) {
        const listed = await listAll(filter)
        const params = new URLSearchParams(filter)
        const expected = all.filter((j) => (params.get('status') ?? j.status) === j.status && (params.get('kind') ?? j.kind) === j.kind)
        expect(listed.map((j) => j.id).sort(), filter).toEqual(expected.map((j) => j.id).sort())
      }
      // A cursor the other scope was given moves within the caller's own jobs only.
      const theirs: Answer = await call(OTHER[side], 'GET', '/api/v1/jobs?limit=3')
      for (const j of await listAll('', theirs.json.nextCursor)) expect(own.has(j.id)).toBe(true)
      // The stats count the caller's own jobs alone.
      const counts = new Map<string, number>()
      for (const j of all) counts.set(`${j.kind} ${j.status}`, (counts.get(`${j.kind} ${j.status}`) ?? 0) + 1)
      const stats: Answer = await call(side, 'GET', '/api/v1/stats')
      expect(new Map(stats.json.counts.map((c: { kind: string; status: string; count: number }) => [`${c.kind} ${c.status}`, c.count]))).toEqual(counts)
      // An own stream shows only its own job.
      const stream = await api.events(ids[side][3]!, TOKENS[side])
      for (const e of await stream.rest()) expect(JSON.parse(e.data).id).toBe(ids[side][3])
    }

    // The refusals above were for scope alone: the owner's cancel and retry of the same jobs work.
    for (const side of ['a', 'b'] as const) {
      expect((await call(side, 'POST', `/api/v1/jobs/${ids[side][0]}/cancel`)).status).toBe(200)
      expect((await call(side, 'POST', `/api/v1/jobs/${ids[side][4]}/retry`)).status).toBe(200)
    }
    console.info(`scope isolation (${backend.name}): ${JOBS} jobs per scope, ${foreignCalls} calls with the other scope's ids, ${foreignCalls - mismatches.length} answered as missing`)
  }, bound(60_000, 600_000))
})
