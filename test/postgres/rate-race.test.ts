/**
 * Rate limits and fair positions under real concurrency: several drivers,
 * each with its own pool as separate processes would have, against one
 * schema. Time is the `now` each call is given (the drivers' clocks a few
 * ms apart, so a claim may read claims recorded ahead of it); the oracle is
 * what the database recorded (jobs.started_at of the claimed jobs, the
 * fair positions), never a process's own clock. Run directly and behind
 * PgBouncer in transaction mode (advisory locks and the READ COMMITTED
 * claim are transaction-scoped; no statement is prepared there).
 */
import pg from 'pg'
import { describe, expect, it } from 'vitest'
import type { ClaimedJob, KindRule, NewJob } from 'jobtable'
import { postgres, type PostgresOptions } from 'jobtable/postgres'
import { newJobId } from '../../src/id.js'
import { PG_URL, PGBOUNCER_URL, pgbouncerSkipReason, postgresBackend } from '../support/backends.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'

const skip = postgresBackend().skip

const T0 = Date.UTC(2020, 0, 1)
let made = 0

function job(kind: string, fields: Partial<NewJob> = {}): NewJob {
  return {
    id: newJobId(T0 + ++made),
    kind,
    payload: '{}',
    scope: null,
    priority: 0,
    runAt: null,
    maxAttempts: 1,
    timeoutMs: null,
    requeueInterrupted: false,
    ...fields,
  }
}

/** The most starts within any window (t - periodMs, t] among `times`: the window a rate limit counts. */
function busiestWindow(times: readonly number[], periodMs: number): number {
  const sorted = [...times].sort((a, b) => a - b)
  let most = 0
  let first = 0
  for (let last = 0; last < sorted.length; last++) {
    while (sorted[last]! - sorted[first]! >= periodMs) first++
    most = Math.max(most, last - first + 1)
  }
  return most
}

const ways = [
  { name: 'direct', skip, url: PG_URL, options: {} },
  { name: 'behind PgBouncer in transaction mode', skip: pgbouncerSkipReason, url: PGBOUNCER_URL ?? PG_URL, options: { pooler: 'transaction' } },
] satisfies { name: string; skip: string | undefined; url: string; options: Partial<PostgresOptions> }[]

describe.each(ways)('postgres ($name): rate limits and fair positions across concurrent drivers', (way) => {
  if (way.skip !== undefined) {
    it.skip(`skipped: ${way.skip}`, () => {})
    return
  }
  const t = pgSchemaPerTest()
  const DRIVERS = 4
  const open = () => t.closeAfter(postgres({ connectionString: way.url, schema: t.schema, ...way.options }))

  it('concurrent claims of a shared bucket, a per-scope bucket and capped kinds never exceed a limit in any window, and never deadlock', async () => {
    const PERIOD = 100
    const provider = { limit: 7, periodMs: PERIOD, bucket: 'provider' }
    const perScope = { limit: 3, periodMs: PERIOD, bucket: null }
    const limits = new Map<string, KindRule>([
      ['a', { concurrency: null, scopeConcurrency: null, rate: provider }],
      // A capped rated kind: its concurrency lock is taken after the bucket's.
      ['b', { concurrency: 4, scopeConcurrency: null, rate: provider }],
      ['s', { concurrency: null, scopeConcurrency: null, rate: perScope, fair: true }],
      // An unrated capped kind, claimed in the rated claim's transaction under its own lock.
      ['c', { concurrency: 2, scopeConcurrency: null }],
    ])
    // Half the drivers handle a, the others b: their claims of the shared bucket pick different jobs, so only the bucket's lock keeps them apart.
    const kindsOf = [
      ['a', 's', 'c'],
      ['b', 's', 'c'],
    ]
    const drivers = Array.from({ length: DRIVERS }, open)
    const scopes = ['h1', 'h2', 'h3']
    await drivers[0]!.jobInsertMany({
      jobs: [
        ...Array.from({ length: 120 }, (_, i) => job(i % 2 === 0 ? 'a' : 'b')),
        ...Array.from({ length: 90 }, (_, i) => job('s', { scope: scopes[i % 3]!, fair: true })),
        ...Array.from({ length: 60 }, () => job('c')),
      ],
      now: T0,
    })

    // Each driver claims at every step of the same clock, a few ms from the others, and finishes what it took at its next claim.
    const ITERATIONS = 60
    await Promise.all(
      drivers.map(async (driver, d) => {
        const runnerId = `runner-${d}`
        let held: ClaimedJob[] = []
        for (let i = 0; i < ITERATIONS; i++) {
          const now = T0 + 10 + i * 5 + d * 2
          const claim = { limit: 4, runnerId, kinds: kindsOf[d % 2]!, limits }
          if (held.length === 0) held = await driver.jobClaim({ ...claim, now })
          else {
            const finishes = held.map((j) => ({ id: j.id, attempt: j.attempt, status: 'succeeded' as const, result: null, error: null, runAt: null }))
            const { applied, claimed } = await driver.jobFinishManyAndClaim!({ finishes, now, claim })
            expect(applied.every(Boolean)).toBe(true)
            held = claimed
          }
        }
      }),
    )

    const started = (await t.admin.query<{ kind: string; scope: string | null; at: number }>(`SELECT kind, scope, started_at::float8 AS at FROM "${t.schema}".jobs WHERE started_at IS NOT NULL`)).rows
    const providerStarts = started.filter((r) => r.kind === 'a' || r.kind === 'b').map((r) => r.at)
    // The test raced: the bucket filled in several windows, and every unrated job a claim could take was taken.
    expect(providerStarts.length).toBeGreaterThanOrEqual(2 * provider.limit)
    expect(busiestWindow(providerStarts, PERIOD)).toBeLessThanOrEqual(provider.limit)
    for (const scope of scopes) {
      const starts = started.filter((r) => r.kind === 's' && r.scope === scope).map((r) => r.at)
      expect(starts.length).toBeGreaterThanOrEqual(perScope.limit)
      expect(busiestWindow(starts, PERIOD)).toBeLessThanOrEqual(perScope.limit)
    }
    expect(started.filter((r) => r.kind === 'c').length).toBeGreaterThan(0)
    // One ledger row per rated claim, in its bucket (none is old enough to be forgotten).
    const ledger = (await t.admin.query<{ bucket: string; n: number }>(`SELECT bucket, count(*)::int AS n FROM "${t.schema}".rate_starts GROUP BY bucket ORDER BY bucket`)).rows
    expect(ledger).toEqual([
      { bucket: 'provider', n: providerStarts.length },
      ...scopes.map((scope) => ({ bucket: `s@${scope}`, n: started.filter((r) => r.kind === 's' && r.scope === scope).length })),
    ])
  })

  it("concurrent fair inserts into the same lanes, by jobInsertMany and in users' own transactions, give each job its own position", async () => {
    const drivers = Array.from({ length: DRIVERS }, open)
    const pools = drivers.map(() => {
      const pool = new pg.Pool({ connectionString: way.url, max: 1 })
      t.closeAfter({ close: () => pool.end() })
      return pool
    })
    const BATCHES = 25
    await Promise.all(
      drivers.map(async (driver, d) => {
        for (let i = 0; i < BATCHES; i++) {
          // Each batch writes both lanes, half of the drivers in the other order: the lanes' locks are taken in one order all the same.
          const lanes = d % 2 === 0 ? ['house', 'other'] : ['other', 'house']
          const jobs = lanes.map((scope) => job('f', { scope, fair: true }))
          if (d < 2) {
            await driver.jobInsertMany({ jobs, now: T0 + i })
            continue
          }
          const client = await pools[d]!.connect()
          try {
            await client.query('BEGIN')
            await driver.jobInsertTx({ tx: client, jobs, now: T0 + i })
            await client.query('COMMIT')
          } finally {
            client.release()
          }
        }
      }),
    )
    const rows = (await t.admin.query<{ scope: string; pos: number }>(`SELECT scope, fair_pos::float8 AS pos FROM "${t.schema}".jobs WHERE kind = 'f'`)).rows
    for (const scope of ['house', 'other']) {
      const positions = rows.filter((r) => r.scope === scope).map((r) => r.pos).sort((a, b) => a - b)
      // Every lane stays busy (nothing is claimed), so its positions run on from 0 without a gap or a repeat.
      expect(positions).toEqual(Array.from({ length: DRIVERS * BATCHES }, (_, i) => i))
    }
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL rate race tests SKIPPED: ${skip}`)
