import type { Logger } from 'jobtable'

export interface LogLine {
  readonly level: 'debug' | 'info' | 'warn' | 'error'
  readonly fields: Record<string, unknown>
  readonly message: string
}

/** A logger that keeps every line, for tests that read what was logged. */
export function captureLogs(): Logger & { lines: LogLine[]; text(): string } {
  const lines: LogLine[] = []
  const at = (level: LogLine['level']) => (fields: object, message: string) => {
    lines.push({ level, fields: { ...(fields as Record<string, unknown>) }, message })
  }
  return {
    lines,
    debug: at('debug'),
    info: at('info'),
    warn: at('warn'),
    error: at('error'),
    // Errors are expanded as a real logger would print them: message, stack, cause and own properties.
    text: () => lines.map((l) => JSON.stringify(l, expandErrors)).join('\n'),
  }
}

function expandErrors(_key: string, value: unknown): unknown {
  if (!(value instanceof Error)) return value
  return { ...value, name: value.name, message: value.message, stack: value.stack, cause: value.cause }
}
