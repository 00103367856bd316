import { pino } from 'pino'

/**
 * The structured logger jobtable writes to. pino satisfies it as it is;
 * so does any logger with these four methods. jobtable passes fields such
 * as `job_id`, `kind` and `code`, and never a payload, a result or a
 * handler's error text.
 */
export interface Logger {
  debug(fields: object, message: string): void
  info(fields: object, message: string): void
  warn(fields: object, message: string): void
  error(fields: object, message: string): void
}

/**
 * The logger a runner uses when none is given: pino at level `info`,
 * writing JSON lines to standard output.
 */
export function defaultLogger(): Logger {
  return pino({ name: 'jobtable', level: 'info' })
}
