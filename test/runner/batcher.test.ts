import { describe, expect, it } from 'vitest'
import { Batcher } from '../../src/runner/batcher.js'
import { gate } from '../support/wait.js'

/** A Batcher whose writes record their items and wait for the test to let each one land. */
function recording() {
  const batches: string[][] = []
  const landings: { open(): void }[] = []
  const batcher = new Batcher<string>(async (items) => {
    batches.push(items)
    const landed = gate()
    landings.push(landed)
    await landed.promise
  })
  return { batcher, batches, landings }
}

/** Lets the microtasks queued so far run, several levels deep, but never a turn of the event loop. */
async function microtasks(depth = 20): Promise<void> {
  for (let i = 0; i < depth; i++) await Promise.resolve()
}

describe('Batcher', () => {
  it('writes a lone item at once, within the microtasks of its add, and the items added with it together', async () => {
    const { batcher, batches, landings } = recording()
    const done = [batcher.add('a'), batcher.add('b')]
    await microtasks(1)
    expect(batches).toEqual([['a', 'b']])
    landings[0]!.open()
    await Promise.all(done)
  })

  it('sends items that waited for a write together with those its answered callers add right after it lands', async () => {
    const { batcher, batches, landings } = recording()
    // Like a worker: once its own write lands, it runs its next job (several awaits deep) and adds that job's write.
    const worker = async (first: string, next: string) => {
      await batcher.add(first)
      await microtasks()
      await batcher.add(next)
    }
    const running = [worker('a1', 'a2'), worker('b1', 'b2')]
    await microtasks(1)
    expect(batches).toEqual([['a1', 'b1']])
    // c waits while the first write is in flight.
    const c = batcher.add('c')
    landings[0]!.open()
    for (let turn = 0; turn < 10 && batches.length < 2; turn++) await new Promise((resolve) => setImmediate(resolve))
    // Not [c], then [a2, b2] behind it: one write for all three.
    expect(batches).toEqual([['a1', 'b1'], ['c', 'a2', 'b2']])
    landings[1]!.open()
    await Promise.all([...running, c])
  })

  it('rejects every item of a write that throws, and writes the next batch', async () => {
    const batches: string[][] = []
    const batcher = new Batcher<string>(async (items) => {
      batches.push(items)
      if (items.includes('bad')) throw new Error('refused')
    })
    const refused = Promise.allSettled([batcher.add('bad'), batcher.add('x')])
    await microtasks(1)
    const later = batcher.add('y')
    expect((await refused).map((r) => r.status)).toEqual(['rejected', 'rejected'])
    await later
    expect(batches).toEqual([['bad', 'x'], ['y']])
  })
})
