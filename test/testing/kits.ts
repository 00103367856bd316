/**
 * Test kits on each backend: the kit's own SQLite database (what a
 * SQLite user gets with no driver option), and a PostgreSQL driver on a
 * fresh schema of each test's own, handed in as `driver`. Kits are closed,
 * and their schemas dropped, after each test.
 */
import { afterEach } from 'vitest'
import type { Driver } from 'jobtable'
import type { SqliteDatabase } from 'jobtable/sqlite'
import { createTestKit, type TestKit, type TestKitOptions } from 'jobtable/testing'
import { describeEachBackend, type Backend, type Store } from '../support/backends.js'

/** A kit on the backend a describe block runs on; typed on any driver, so one test body serves both. */
export type AnyKit<K = undefined> = TestKit<K, Driver>

export interface KitMaker {
  /** The backend this block runs on: `sqlite` or `postgres`. */
  readonly backend: string
  /** Makes a kit on this backend (closed after the test); `driver` is the backend's, so it may not be given. */
  kit<K = undefined>(options?: Omit<TestKitOptions<K, Driver>, 'driver'>): Promise<AnyKit<Awaited<K>>>
  /** Options for createTestKit on this backend, for a test that calls it itself and expects it to fail: the store is dropped after the test. */
  options<K = undefined>(options?: Omit<TestKitOptions<K, Driver>, 'driver'>): Promise<TestKitOptions<K, Driver>>
  /**
   * Runs fn inside a transaction of the test's own on the kit's database,
   * committed or rolled back; fn receives the handle `enqueueTx` takes (the
   * kit's better-sqlite3 database, or a client of a pool on the kit's
   * PostgreSQL schema) and may return a promise only on PostgreSQL.
   */
  transaction(kit: AnyKit<unknown>, fn: (tx: never) => unknown, outcome: 'commit' | 'rollback'): Promise<void>
}

/**
 * Runs `body` once per backend, as describeEachBackend does, with a
 * KitMaker for that backend.
 */
export function describeKits(title: string, body: (kits: KitMaker) => void): void {
  describeEachBackend(title, (backend) => body(kitMaker(backend)))
}

function kitMaker(backend: Backend): KitMaker {
  const kits: AnyKit<unknown>[] = []
  const stores: Store[] = []
  const storeOf = new Map<AnyKit<unknown>, Store>()
  afterEach(async () => {
    for (const kit of kits.splice(0)) await kit.close()
    for (const store of stores.splice(0)) await store.drop()
    storeOf.clear()
  })
  const options = async <K>(given: Omit<TestKitOptions<K, Driver>, 'driver'> = {}): Promise<TestKitOptions<K, Driver>> => {
    if (backend.name === 'sqlite') return given as TestKitOptions<K, Driver>
    const store = await backend.store()
    stores.push(store)
    return { ...given, driver: store.driver() }
  }
  return {
    backend: backend.name,
    options,
    async kit<K>(given?: Omit<TestKitOptions<K, Driver>, 'driver'>) {
      const made = (await createTestKit(await options(given))) as AnyKit<Awaited<K>>
      kits.push(made as AnyKit<unknown>)
      if (backend.name !== 'sqlite') storeOf.set(made as AnyKit<unknown>, stores[stores.length - 1]!)
      return made
    },
    async transaction(kit, fn, outcome) {
      const store = storeOf.get(kit)
      if (store !== undefined) return store.transaction(fn as (tx: unknown) => unknown, outcome)
      // The kit's own SQLite database: better-sqlite3's transactions are synchronous, so fn must not await.
      const db = kit.database as unknown as SqliteDatabase
      db.exec('BEGIN IMMEDIATE')
      try {
        fn(db as never)
      } catch (err) {
        db.exec('ROLLBACK')
        throw err
      }
      db.exec(outcome === 'commit' ? 'COMMIT' : 'ROLLBACK')
    },
  }
}
