import { expect, it } from 'vitest'
import { z } from 'zod'
import { CODE_INTERNAL } from 'jobtable'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'
import { track } from '../support/wait.js'

/** Results no store can keep as they are, each made fresh for its job. */
const POISON: Record<string, () => unknown> = {
  'a NUL character': () => ({ text: 'before\u0000after' }),
  'a lone surrogate': () => ({ text: 'half \ud800 a pair' }),
  'a lone surrogate in a key': () => ({ ['key\udc00']: 1 }),
  '100,000-deep nesting': () => {
    let v: unknown = 1
    for (let i = 0; i < 100_000; i++) v = [v]
    return v
  },
  'a BigInt': () => ({ n: 10n }),
  'a cycle': () => {
    const o: Record<string, unknown> = {}
    o.self = o
    return o
  },
  'a toJSON that throws': () => ({ toJSON: () => {
    throw new Error('toJSON exploded')
  } }),
}

const which = z.strictObject({ poison: z.string(), n: z.number().int() })

describeEachBackend('poison results', (backend) => {
  const h = harness(backend)

  it('each poison result fails its job with internal_error at its first final write, with no retry; a partial result of the same is refused to the handler; the next 1,000 jobs are unaffected', async () => {
    const runner = h.runner({ workers: 4 })
    const starts = new Map<string, number>()
    const publishErrors: string[] = []
    const kind = runner.register('poisoned', {
      payload: which,
      result: (r: unknown) => r,
      retry: { maxAttempts: 3 },
      handler: async ({ poison }, job) => {
        starts.set(job.id, (starts.get(job.id) ?? 0) + 1)
        // Well-formed text beyond ASCII, a surrogate pair included, is kept as it is.
        if (poison === 'none') return { ok: true, text: 'pâte 🍝' }
        try {
          await job.publish(POISON[poison]!())
        } catch (err) {
          publishErrors.push((err as { code?: string }).code ?? 'thrown')
        }
        return POISON[poison]!()
      },
    })
    const done = track(runner)
    await runner.start()
    const poisoned = new Map<string, string>()
    for (const name of Object.keys(POISON)) poisoned.set(await kind.enqueue({ poison: name, n: 0 }), name)
    await done.ends([...poisoned.keys()])
    for (const [id, name] of poisoned) {
      expect(await runner.get(id), name).toMatchObject({ status: 'failed', error: CODE_INTERNAL, attempt: 1 })
      expect(starts.get(id), name).toBe(1)
    }
    expect(publishErrors).toHaveLength(Object.keys(POISON).length)
    const ids = await kind.enqueueMany(Array.from({ length: 1000 }, (_, n) => ({ poison: 'none', n })))
    await done.ends(ids)
    const page = await runner.list({ kind: 'poisoned', status: 'succeeded', limit: 1000 })
    expect(page.jobs).toHaveLength(1000)
    for (const job of page.jobs) expect(job.result).toEqual({ ok: true, text: 'pâte 🍝' })
  })
})
