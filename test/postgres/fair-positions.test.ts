/**
 * The positions the PostgreSQL driver gives fair jobs in one insert
 * statement (queries' fairInsert), read from jobs.fair_pos: several lanes
 * and priorities in one batch, a lane still busy, an idle one starting at
 * the head of its priority's queue.
 */
import { describe, expect, it } from 'vitest'
import type { KindRule, NewJob } from 'jobtable'
import { postgres } from 'jobtable/postgres'
import { newJobId } from '../../src/id.js'
import { PG_URL, postgresBackend } from '../support/backends.js'
import { pgSchemaPerTest } from '../support/pg-schema.js'

const skip = postgresBackend().skip
const T0 = Date.UTC(2020, 0, 1)
let made = 0

function fairJob(scope: string | null, priority = 0): NewJob {
  return { id: newJobId(T0 + ++made), kind: 'f', payload: '{}', scope, priority, runAt: null, maxAttempts: 1, timeoutMs: null, requeueInterrupted: false, fair: true }
}

describe.skipIf(skip !== undefined)('postgres: fair positions given at insert', () => {
  const t = pgSchemaPerTest()
  const fair = new Map<string, KindRule>([['f', { concurrency: null, scopeConcurrency: null, fair: true }]])

  it('a batch gives each lane consecutive positions from its start at each priority; a lane back after claims starts at the head', async () => {
    const driver = t.closeAfter(postgres({ connectionString: PG_URL, schema: t.schema }))
    const positions = async (jobs: readonly NewJob[]) => {
      const rows = (await t.admin.query<{ id: string; pos: number | null }>(`SELECT id, fair_pos::float8 AS pos FROM "${t.schema}".jobs WHERE id = ANY($1)`, [jobs.map((j) => j.id)])).rows
      const byId = new Map(rows.map((r) => [r.id, r.pos]))
      return jobs.map((j) => byId.get(j.id))
    }
    // One lane with a job of a higher priority among its own: each takes the position after the one before.
    const first = [fairJob('a'), fairJob('a'), fairJob('a', 5), fairJob('a'), fairJob(null), { ...fairJob('b'), fair: false }]
    await driver.jobInsertMany({ jobs: first, now: T0 })
    expect(await positions(first)).toEqual([0, 1, 2, 3, 0, null])

    // The claim takes the priority 5 job, then at priority 0 the two at position 0 (a's, then the unscoped one): a1 (1) and a3 (3) are left.
    const claimed = await driver.jobClaim({ limit: 3, runnerId: 'r', kinds: ['f'], limits: fair, now: T0 + 10 })
    expect(claimed.map((j) => j.id).sort()).toEqual([first[0]!.id, first[2]!.id, first[4]!.id].sort())
    // a is busy (its last job queued): it goes on from its next position, 4. c is new: it starts at the head of priority 0, a1's 1.
    // d is alone at priority 9: 0.
    const second = [fairJob('c'), fairJob('a'), fairJob('c'), fairJob('d', 9)]
    await driver.jobInsertMany({ jobs: second, now: T0 + 20 })
    expect(await positions(second)).toEqual([1, 4, 2, 0])
  })
})

if (skip !== undefined) console.warn(`jobtable tests: PostgreSQL fair position tests SKIPPED: ${skip}`)
