/**
 * A small app's signup mail, as jobs: a welcome mail at once, which
 * schedules a reminder three days later; the reminder retries while the
 * mail provider is down. A digest of the week's signups goes out every
 * Monday at 09:00, Paris time, as a recurring job. The mailer is handed in, so the app passes its
 * provider's client and a test passes a fake (signup.test.ts).
 */
import { z } from 'zod'
import type { Driver, Runner } from 'jobtable'

export const DAY = 24 * 60 * 60 * 1000

/** What the jobs need of a mail provider. */
export interface Mailer {
  send(to: string, template: 'welcome' | 'reminder' | 'digest'): Promise<void>
}

const user = z.strictObject({ userId: z.string().min(1), email: z.email() })

/** Registers both kinds on `runner`; generic in the driver, so a transactional enqueue takes that driver's transaction handle. */
export function registerSignupKinds<D extends Driver>(runner: Runner<D>, mailer: Mailer) {
  const reminder = runner.register('signup_reminder', {
    payload: user,
    failures: ['mailer_down'],
    // Three attempts in all, a minute apart at first (each with a random half taken off).
    retry: { maxAttempts: 3, codes: ['mailer_down'], backoff: { baseMs: 60_000 } },
    handler: async ({ email }, job) => {
      try {
        await mailer.send(email, 'reminder')
      } catch {
        return job.fail('mailer_down')
      }
    },
  })

  const welcome = runner.register('signup_welcome', {
    payload: user,
    handler: async ({ userId, email }) => {
      await mailer.send(email, 'welcome')
      await reminder.enqueue({ userId, email }, { delayMs: 3 * DAY })
    },
  })

  return { welcome, reminder }
}

/** Registers the weekly digest's kind on `runner` and declares its schedule: every Monday at 09:00 in Paris. */
export function registerWeeklyDigest<D extends Driver>(runner: Runner<D>, mailer: Mailer) {
  const digest = runner.register('signup_digest', {
    payload: z.strictObject({ to: z.email(), week: z.string() }),
    handler: async ({ to }) => mailer.send(to, 'digest'),
  })
  // Each Monday's tick is enqueued once, however many of the app's processes declare it.
  runner.schedule('weekly-signup-digest', digest, {
    cron: '0 9 * * 1',
    timezone: 'Europe/Paris',
    payload: (tick) => ({ to: 'team@example.com', week: tick.toISOString().slice(0, 10) }),
  })
  return { digest }
}
