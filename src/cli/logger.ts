import { pino, type DestinationStream, type Logger as Pino } from 'pino'

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' }
const OMIT = new Set(['level', 'time', 'msg', 'pid', 'hostname', 'name'])

/**
 * The command's logger: pino writing to stderr, as JSON lines when stderr
 * is not a terminal (for a log collector) and as short readable lines when
 * it is. stdout is left to the command's own output (`jobs list`).
 */
export function cliLogger(level: string, stderr: NodeJS.WriteStream = process.stderr): Pino {
  const options = { name: 'jobtable', level, base: { name: 'jobtable' } }
  if (!stderr.isTTY) return pino(options, pino.destination({ fd: 2, sync: true }))
  return pino(options, readable(stderr))
}

/** A pino destination printing `12:00:00 INFO  message key=value` lines. */
function readable(out: NodeJS.WritableStream): DestinationStream {
  return {
    write(line: string) {
      let entry: Record<string, unknown>
      try {
        entry = JSON.parse(line) as Record<string, unknown>
      } catch {
        out.write(line)
        return
      }
      const time = new Date(typeof entry.time === 'number' ? entry.time : Date.now()).toTimeString().slice(0, 8)
      const level = (LEVELS[entry.level as number] ?? String(entry.level)).padEnd(5)
      const fields = Object.entries(entry)
        .filter(([k]) => !OMIT.has(k))
        .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`)
      out.write(`${time} ${level} ${String(entry.msg ?? '')}${fields.length ? ' ' + fields.join(' ') : ''}\n`)
    },
  }
}

/** Whether a --log-level value is one pino knows. */
export function isLogLevel(level: string): boolean {
  return ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'].includes(level)
}
