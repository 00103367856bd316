import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { z } from 'zod'
import { defineKind, type Job } from 'jobtable'
import { Schedule } from '../../src/schedule.js'
import { describeEachBackend } from '../support/backends.js'
import { harness } from '../support/harness.js'

// Recurring schedules on the days a zone's clocks change. The promise
// (README, Recurring jobs): each wall-clock time the pattern names runs
// once that day; a time a spring-forward gap skips runs at the first
// instant after the gap, and times that land on one instant are one tick
// (one job); a time a fall-back repeats runs once, at its first
// occurrence. The expected ticks come from an oracle that reads the zone
// minute by minute through Intl, independent of the library's arithmetic.

const MINUTE = 60_000
const HOUR = 60 * MINUTE

/**
 * Days whose clocks change in 2026, both changes of four zones (a
 * half-hour one and one at midnight among them), each with the local
 * minutes of the day the change skips or repeats (checked below).
 */
const CHANGES = [
  { zone: 'Europe/Paris', date: '2026-03-29', change: 'gap', from: 120, to: 180 }, // 02:00 -> 03:00
  { zone: 'Europe/Paris', date: '2026-10-25', change: 'repeat', from: 120, to: 180 }, // 03:00 -> 02:00
  { zone: 'America/New_York', date: '2026-03-08', change: 'gap', from: 120, to: 180 }, // 02:00 -> 03:00
  { zone: 'America/New_York', date: '2026-11-01', change: 'repeat', from: 60, to: 120 }, // 02:00 -> 01:00
  { zone: 'Australia/Lord_Howe', date: '2026-04-05', change: 'repeat', from: 90, to: 120 }, // 02:00 -> 01:30
  { zone: 'Australia/Lord_Howe', date: '2026-10-04', change: 'gap', from: 120, to: 150 }, // 02:00 -> 02:30
  { zone: 'America/Santiago', date: '2026-04-04', change: 'repeat', from: 1380, to: 1440 }, // 24:00 -> 23:00: the repeated hour ends the day
  { zone: 'America/Santiago', date: '2026-09-06', change: 'gap', from: 0, to: 60 }, // 00:00 -> 01:00: the day starts at 01:00
] as const

type Change = (typeof CHANGES)[number]

const readers = new Map<string, Intl.DateTimeFormat>()
/** The wall-clock reading of `instant` in `zone`, as "YYYY-MM-DD HH:MM" (so readings compare as strings). */
function reading(zone: string, instant: number): string {
  let reader = readers.get(zone)
  if (reader === undefined) {
    reader = new Intl.DateTimeFormat('sv-SE', { timeZone: zone, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' })
    readers.set(zone, reader)
  }
  return reader.format(instant)
}

const scans = new Map<string, { instant: number; reading: string }[]>()
/** Every minute from before local `date` starts in any zone until after it ends, with its reading, in order. */
function minutesAround(zone: string, date: string): { instant: number; reading: string }[] {
  const key = `${zone} ${date}`
  let minutes = scans.get(key)
  if (minutes === undefined) {
    const from = Date.parse(`${date}T00:00:00Z`) - 15 * HOUR
    minutes = []
    for (let instant = from; instant < from + 54 * HOUR; instant += MINUTE) minutes.push({ instant, reading: reading(zone, instant) })
    scans.set(key, minutes)
  }
  return minutes
}

const pad = (n: number) => String(n).padStart(2, '0')
const clockTime = (minuteOfDay: number) => `${pad(Math.floor(minuteOfDay / 60))}:${pad(minuteOfDay % 60)}`

/**
 * The oracle: the instants a pattern naming `times` (minutes of the day)
 * enqueues on local `date`. Each time at its first occurrence; a time the
 * day does not have at the first minute whose reading is past it (the end
 * of the gap); times on one instant once.
 */
function expectedTicks(zone: string, date: string, times: readonly number[]): number[] {
  const minutes = minutesAround(zone, date)
  const ticks = new Set<number>()
  for (const time of times) {
    const wall = `${date} ${clockTime(time)}`
    const at = minutes.find((m) => m.reading === wall) ?? minutes.find((m) => m.reading > wall)
    ticks.add(at!.instant)
  }
  return [...ticks].sort((a, b) => a - b)
}

/** The first instant of local `date`. */
function dayStart(zone: string, date: string): number {
  return minutesAround(zone, date).find((m) => m.reading >= `${date} 00:00`)!.instant
}

/** The local date `days` after `date`. */
function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * 24 * HOUR).toISOString().slice(0, 10)
}

/** How many of `ticks` fall on each local date, by the oracle's reading. */
function perDay(zone: string, ticks: readonly number[]): Record<string, number> {
  const counts: Record<string, number> = {}
  for (const tick of ticks) {
    const date = reading(zone, tick).slice(0, 10)
    counts[date] = (counts[date] ?? 0) + 1
  }
  return counts
}

/** A daily pattern and the minutes of the day it names. */
interface Pattern {
  readonly cron: string
  readonly times: readonly number[]
}

/** Daily patterns of the four shapes, their hours drawn from `hour`. */
function patternsOf(hour: fc.Arbitrary<number>): fc.Arbitrary<Pattern> {
  const minute = fc.oneof(fc.constantFrom(0, 15, 30, 45), fc.integer({ min: 0, max: 59 }))
  return fc.oneof(
    // M1,M2 H * * *
    fc
      .tuple(minute, minute, hour)
      .filter(([m1, m2]) => m1 !== m2)
      .map(([m1, m2, h]) => ({ cron: `${m1},${m2} ${h} * * *`, times: [h * 60 + m1, h * 60 + m2] })),
    // */N H * * *
    fc.tuple(fc.constantFrom(5, 7, 10, 15, 20, 25, 30), hour).map(([n, h]) => ({
      cron: `*/${n} ${h} * * *`,
      times: Array.from({ length: Math.ceil(60 / n) }, (_, i) => h * 60 + i * n),
    })),
    // M H1,H2 * * *
    fc
      .tuple(minute, hour, fc.integer({ min: 0, max: 23 }))
      .filter(([, h1, h2]) => h1 !== h2)
      .map(([m, h1, h2]) => ({ cron: `${m} ${h1},${h2} * * *`, times: [h1 * 60 + m, h2 * 60 + m] })),
    // M H1-H2 * * *, a range of two to four hours that holds H
    fc.tuple(minute, hour, fc.integer({ min: 1, max: 3 })).map(([m, h, span]) => {
      const first = Math.min(h, 23 - span)
      return { cron: `${m} ${first}-${first + span} * * *`, times: Array.from({ length: span + 1 }, (_, i) => (first + i) * 60 + m) }
    }),
  )
}

/** Any pattern, its hours near the changes (00:00 to 03:00, 23:00) half of the time. */
const patterns = patternsOf(fc.oneof(fc.constantFrom(0, 1, 2, 3, 23), fc.integer({ min: 0, max: 23 })))

/** A change, and a pattern naming at least one of the times it skips or repeats: croner alone runs each such pattern wrong. */
const acrossChange: fc.Arbitrary<[Change, Pattern]> = fc.constantFrom(...CHANGES).chain((c) =>
  patternsOf(fc.integer({ min: Math.floor(c.from / 60), max: Math.floor((c.to - 1) / 60) }))
    .filter((p) => p.times.some((t) => t >= c.from && t < c.to))
    .map((p): [Change, Pattern] => [c, p]),
)

describe('recurring schedules across daylight-saving changes: the ticks', () => {
  it('the oracle reads real changes: on each chosen day the times listed are skipped, or occur twice, and the others once', () => {
    for (const { zone, date, change, from, to } of CHANGES) {
      const occurrences = new Map<string, number>()
      for (const { reading } of minutesAround(zone, date)) occurrences.set(reading, (occurrences.get(reading) ?? 0) + 1)
      for (let time = 0; time < 24 * 60; time++) {
        const listed = time >= from && time < to
        expect(occurrences.get(`${date} ${clockTime(time)}`) ?? 0, `${zone} ${date} ${clockTime(time)}`).toBe(!listed ? 1 : change === 'gap' ? 0 : 2)
      }
    }
  })

  it('property: on a change day and the days either side, the ticks are the wall times the pattern names, once each, a skipped one at the end of the gap (one tick for all that land there), a repeated one at its first occurrence', () => {
    fc.assert(
      fc.property(fc.constantFrom(...CHANGES), patterns, ({ zone, date }, pattern) => {
        const days = [addDays(date, -1), date, addDays(date, 1)]
        const expected = days.flatMap((d) => expectedTicks(zone, d, pattern.times))
        const schedule = new Schedule('dst', 'send_digest', { cron: pattern.cron, timezone: zone, payload: null })
        const ticks: number[] = []
        for (let t = schedule.next(expected[0]! - 1); t !== null && t <= expected.at(-1)!; t = schedule.next(t)) ticks.push(t)
        expect(perDay(zone, ticks)).toEqual(perDay(zone, expected))
        expect(ticks.map((t) => new Date(t).toISOString())).toEqual(expected.map((t) => new Date(t).toISOString()))
        // The latest tick at or before a time (missed: 'last', and where a new schedule starts): each tick at it, the one before just before it.
        for (const [i, tick] of expected.entries()) {
          expect(schedule.latest(tick)).toBe(tick)
          if (i > 0) expect(schedule.latest(tick - 1)).toBe(expected[i - 1])
        }
      }),
      { numRuns: 300 },
    )
  })
})

const digest = defineKind('send_digest', { payload: z.strictObject({ list: z.string() }) })

describeEachBackend('recurring jobs across daylight-saving changes', (backend) => {
  const h = harness(backend)

  /** A runner on the test clock with the digest kind and no handler: jobs stay where the test reads them. */
  const setup = (clock: { now: number }) => {
    const runner = h.runner({ clock: () => clock.now, driver: h.store.driver() })
    runner.register(digest)
    return runner
  }

  /** The due times of a schedule's jobs (each schedule's jobs carry its name as their scope), as ISO strings. */
  const ticksOf = async (runner: ReturnType<typeof setup>, name: string): Promise<string[]> => {
    const jobs: Job[] = (await runner.list({ scope: name, limit: 1000 })).jobs
    return jobs.map((j) => j.runAt!).sort((a, b) => a - b).map((t) => new Date(t).toISOString())
  }

  const at = (iso: string) => `${iso}:00.000Z`

  // The hour of the change: Paris and New York skip 02:00-03:00 in spring; Paris repeats 02:00-03:00, New York 01:00-02:00 in autumn.
  const cases = [
    {
      zone: 'Europe/Paris',
      date: '2026-03-29',
      jobs: {
        '0,30 2 * * *': [at('2026-03-29T01:00')], // 02:00 and 02:30 do not exist: one job at 03:00 CEST
        '0 2,14 * * *': [at('2026-03-29T01:00'), at('2026-03-29T12:00')],
        '*/30 2 * * *': [at('2026-03-29T01:00')],
      },
    },
    {
      zone: 'Europe/Paris',
      date: '2026-10-25',
      jobs: {
        '0,30 2 * * *': [at('2026-10-25T00:00'), at('2026-10-25T00:30')], // 02:00 and 02:30 CEST, not again in CET
        '0 2,14 * * *': [at('2026-10-25T00:00'), at('2026-10-25T13:00')],
        '*/30 2 * * *': [at('2026-10-25T00:00'), at('2026-10-25T00:30')],
      },
    },
    {
      zone: 'America/New_York',
      date: '2026-03-08',
      jobs: {
        '0,30 2 * * *': [at('2026-03-08T07:00')], // one job at 03:00 EDT
        '0 2,14 * * *': [at('2026-03-08T07:00'), at('2026-03-08T18:00')],
        '*/30 2 * * *': [at('2026-03-08T07:00')],
      },
    },
    {
      zone: 'America/New_York',
      date: '2026-11-01',
      jobs: {
        '0,30 1 * * *': [at('2026-11-01T05:00'), at('2026-11-01T05:30')], // 01:00 and 01:30 EDT, not again in EST
        '0 1,14 * * *': [at('2026-11-01T05:00'), at('2026-11-01T19:00')],
        '*/30 1 * * *': [at('2026-11-01T05:00'), at('2026-11-01T05:30')],
      },
    },
  ]

  for (const { zone, date, jobs } of cases) {
    it(`${zone}, ${date}: a runner that looks every 30 minutes through the day enqueues each named time once (missed: 'last')`, async () => {
      const start = dayStart(zone, date)
      const end = dayStart(zone, addDays(date, 1))
      const clock = { now: start - MINUTE }
      const runner = setup(clock)
      for (const cron of Object.keys(jobs)) runner.schedule(cron, digest, { cron, timezone: zone, payload: { list: cron }, options: { scope: cron } })
      await runner.start()
      await runner.wake()
      for (clock.now = start; clock.now < end; clock.now += 30 * MINUTE) await runner.wake()
      const enqueued: Record<string, string[]> = {}
      for (const cron of Object.keys(jobs)) enqueued[cron] = await ticksOf(runner, cron)
      expect(enqueued).toEqual(jobs)
    })
  }

  it("property: a runner catching up over the three days around a change (missed: 'all') enqueues, on each local day, the oracle's ticks, for patterns naming a time the change skips or repeats", async () => {
    let run = 0
    await fc.assert(
      fc.asyncProperty(acrossChange, async ([{ zone, date }, pattern]) => {
        const name = `dst-${run++}`
        const days = [addDays(date, -1), date, addDays(date, 1)]
        const expected = days.flatMap((d) => expectedTicks(zone, d, pattern.times))
        // First seen just before the window: it starts with the window's first tick.
        const clock = { now: dayStart(zone, days[0]!) - 1 }
        const runner = setup(clock)
        runner.schedule(name, digest, { cron: pattern.cron, timezone: zone, payload: { list: name }, options: { scope: name }, missed: 'all' })
        try {
          await runner.start()
          await runner.wake()
          clock.now = dayStart(zone, addDays(date, 2)) - 1
          await runner.wake()
          await runner.wake()
          const ticks = (await ticksOf(runner, name)).map((iso) => Date.parse(iso))
          expect(perDay(zone, ticks)).toEqual(perDay(zone, expected))
          expect(ticks).toEqual(expected)
        } finally {
          await runner.close()
        }
      }),
      { numRuns: 8 },
    )
  })
})
