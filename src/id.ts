import { randomUUID } from 'node:crypto'

/**
 * A new job id: a UUID version 7 (RFC 9562, section 5.7), that is the
 * enqueue time in milliseconds followed by 74 random bits.
 *
 * Why version 7: ids in time order land at the end of the id index, so an
 * insert dirties one index page instead of a random one; on SQLite that
 * about doubles enqueueMany and concurrent enqueues (BENCHMARKS.md). The
 * 74 random bits keep an id unguessable.
 *
 * Why by hand: the `uuid` package's v7 counts up within a millisecond,
 * so two ids from one caller would tell it how many jobs other callers
 * (other scopes) enqueued between them. Here every bit after the
 * timestamp is random: the version-4 UUID Node makes (from a cached pool
 * of random bytes) with its first 48 bits replaced by the time.
 */
export function newJobId(now: number = Date.now()): string {
  if (now !== lastMs) {
    if (!Number.isSafeInteger(now) || now < 0 || now >= 2 ** 48) throw new RangeError('newJobId: the time must be whole milliseconds from 0 to 2^48')
    const time = now.toString(16).padStart(12, '0')
    lastPrefix = `${time.slice(0, 8)}-${time.slice(8, 12)}-7`
    lastMs = now
  }
  // randomUUID(): xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx, V the variant, already RFC 9562's.
  return lastPrefix + randomUUID().slice(15)
}

/** The time part of the last id made, kept for the ids made in the same millisecond. */
let lastMs = -1
let lastPrefix = ''


/** A job id this jobtable makes (version 7) or made before (version 4), in lower case. */
export const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[47][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

/**
 * For a list cursor whose job may be gone: the id prefix of the
 * millisecond after the id's own (`xxxxxxxx-xxxx`, which every id of that
 * millisecond or later sorts at or after), read from the time a version-7
 * id begins with; null for an id without one (a version-4 id of an older
 * jobtable). See listJobs.
 */
export function idPrefixAfter(id: string): string | null {
  if (!/^[0-9a-f]{8}-[0-9a-f]{4}-7/.test(id)) return null
  const next = parseInt(id.slice(0, 8) + id.slice(9, 13), 16) + 1
  if (next >= 2 ** 48) return null
  const time = next.toString(16).padStart(12, '0')
  return `${time.slice(0, 8)}-${time.slice(8, 12)}`
}
